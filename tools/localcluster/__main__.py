"""Command line of the local cluster: up, down, restart, fleet, nodes, xid."""

import argparse
import sys
from pathlib import Path

import yaml

from . import api, controlplane, fleet, gpu_faults, report


def main(argv=None):
    parser = argparse.ArgumentParser(prog="localcluster", description=__doc__)
    parser.add_argument("--state", default=str(controlplane.DEFAULT_STATE),
                        help="directory of the cluster's state (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a cluster on 127.0.0.1 and write its kubeconfig")
    up.add_argument("--flavour", choices=controlplane.FLAVOURS, default="openshift")
    up.add_argument("--fleet", help="fleet file to create once the cluster is up")
    up.add_argument("--heartbeat-seconds", type=int, default=30)
    sub.add_parser("down", help="stop the cluster and every process it started")
    restart = sub.add_parser("restart", help="restart the API server or etcd of the running cluster (same ports, "
                                             "certificates and data), as a control-plane upgrade does")
    restart.add_argument("component", choices=controlplane.ControlPlane.RESTARTABLE)
    restart.add_argument("--down-seconds", type=float, default=0.0, help="seconds it stays stopped")
    apply = sub.add_parser("fleet", help="create the nodes of a fleet file")
    apply.add_argument("file")
    sub.add_parser("nodes", help="print the nodes with their GPU, OS and runtime facts")
    xid = sub.add_parser("xid", help="inject an XID error on a GPU of a node (the simulator plays what follows: the "
                                     "device plugin, the DCGM exporter's fields, resets and reboots)")
    xid.add_argument("node")
    xid.add_argument("--gpu", type=int, required=True, help="the GPU's index on the node")
    xid.add_argument("--xid", type=int, required=True, help="the XID (79: fallen off the bus, cleared by a reboot)")
    xid.add_argument("--permanent", action="store_true", help="a fault neither a reset nor a reboot clears")
    args = parser.parse_args(argv)

    plane = controlplane.ControlPlane(args.state)
    try:
        if args.command == "up":
            info = plane.up(args.flavour, heartbeat_seconds=args.heartbeat_seconds)
            print("cluster %s up in %.1fs; KUBECONFIG=%s" % (info["flavour"], info["startup_seconds"], plane.kubeconfig))
            if args.fleet:
                apply_fleet(plane, args.fleet)
        elif args.command == "down":
            stopped = plane.down()
            if stopped:
                print("stopped: %s" % ", ".join(stopped))
        elif args.command == "restart":
            plane.restart(args.component, args.down_seconds)
            print("%s restarted; the API server is ready" % args.component)
        elif args.command == "fleet":
            apply_fleet(plane, args.file)
        elif args.command == "nodes":
            client = api.client_from_kubeconfig(plane.kubeconfig)
            print(report.node_table(client))
        elif args.command == "xid":
            if not plane.running():
                raise controlplane.ClusterError("no cluster running from %s: start one (up)" % plane.state)
            fault = gpu_faults.inject_xid(plane.kubeconfig, args.node, args.gpu, args.xid, args.permanent)
            print("node %s: GPU %d (%s, %s) XID %d, cleared by %s" % (
                args.node, fault["gpu"], fault["uuid"], fault["pci_bus_id"], fault["xid"],
                {"reset": "a GPU reset", "reboot": "a reboot", "never": "nothing"}[gpu_faults.clears_with(fault)]))
    except (controlplane.ClusterError, fleet.FleetError, gpu_faults.FaultError) as error:
        print("localcluster: %s" % error, file=sys.stderr)
        return 1
    return 0


def apply_fleet(plane, path):
    spec = yaml.safe_load(Path(path).read_text())
    client = api.client_from_kubeconfig(plane.kubeconfig)
    created = fleet.Fleet(client, spec).apply().wait_ready()
    print("fleet %s: %d nodes" % (spec.get("name", path), len(created.nodes)))


if __name__ == "__main__":
    sys.exit(main())
