"""The project's local Kubernetes control plane with simulated GPU nodes (tests and demo only)."""
