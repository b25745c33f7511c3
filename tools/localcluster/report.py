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


def node_sizes(client, page=500):
    """(node count, mean bytes of a Node's JSON as the API server serves it, bytes of the whole list): what a
    plain read of every Node costs, the yardstick for the collection's reads."""
    sizes, token = [], None
    while True:
        query = [("limit", page)] + ([("continue", token)] if token else [])
        response = client.call_api("/api/v1/nodes", "GET", query_params=query, auth_settings=["BearerToken"],
                                   _preload_content=False, response_type="object")[0]
        body = json.loads(response.data)
        sizes.extend(len(json.dumps(item, separators=(",", ":"))) for item in body.get("items") or [])
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            break
    return len(sizes), (sum(sizes) / len(sizes) if sizes else 0), sum(sizes)


def node_size_line(client):
    count, mean, total = node_sizes(client)
    return "Node objects: %d, mean %.1f KB of JSON as served (%.1f MB for a full list)" % (count, mean / 1e3, total / 1e6)
