"""A table of the cluster's nodes as a person wants to see them, read from the API (not the fleet file)."""

import json
import re

import kubernetes

from .fleet import HARDWARE_ANNOTATION, NFD

GPU_PCI_LABELS = tuple(NFD + "pci-%s.present" % key for key in ("10de", "0302_10de", "0300_10de"))


def node_rows(client):
    rows = []
    for node in kubernetes.client.CoreV1Api(client).list_node().items:
        labels = node.metadata.labels or {}
        info = node.status.node_info
        hardware = json.loads((node.metadata.annotations or {}).get(HARDWARE_ANNOTATION) or "{}")
        gpu = hardware.get("gpu") or {}
        rhcos = re.search(r"\d+\.\d+\.\d+-\d+", info.os_image or "")
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        rows.append({
            "NODE": node.metadata.name,
            "READY": "yes" if ready else "no",
            "NFD GPU": "yes" if any(labels.get(k) == "true" for k in GPU_PCI_LABELS) else "-",
            "GPUS (HW)": "%s x %s" % (gpu.get("count"), gpu.get("product")) if gpu else "-",
            "ALLOCATABLE": (node.status.allocatable or {}).get("nvidia.com/gpu", "-"),
            "RHCOS (osImage)": rhcos.group(0) if rhcos else "-",
            "OSTREE LABEL": labels.get(NFD + "system-os_release.OSTREE_VERSION", "-"),
            "OS": "%s %s" % (labels.get(NFD + "system-os_release.ID", "?"),
                             labels.get(NFD + "system-os_release.VERSION_ID", "")),
            "KERNEL": info.kernel_version,
            "RUNTIME": info.container_runtime_version,
        })
    return sorted(rows, key=lambda r: r["NODE"])


def table(rows):
    if not rows:
        return "(no nodes)"
    headers = list(rows[0])
    widths = {h: max(len(h), *(len(str(r[h])) for r in rows)) for h in headers}
    lines = ["  ".join(h.ljust(widths[h]) for h in headers)]
    lines += ["  ".join(str(r[h]).ljust(widths[h]) for h in headers) for r in rows]
    return "\n".join(lines)


def node_table(client):
    return table(node_rows(client))
