#!/usr/bin/env python3
"""A small client of the rtcell gateway, generated from the same proto/rtcell/v1/*.proto as rtcell ctl.

    python3 examples/python-client/rtcell_client.py --connect unix:/run/rtcell/gateway.sock status
    python3 examples/python-client/rtcell_client.py stats
    python3 examples/python-client/rtcell_client.py set master.trim 0.25
    python3 examples/python-client/rtcell_client.py --connect 10.0.0.5:7447 --token-file token watch --rate 2 --count 5

The Python modules are generated from the .proto files at start (grpcio-tools, into a temporary
directory), so the client always matches the protocol of the checkout it comes with.
Needs: pip install -r examples/python-client/requirements.txt (scripts/setup does it, in
target/python-client-venv when python3 lacks them: run the client with target/python-client-venv/bin/python3)
"""

import argparse
import importlib
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))


def generated_modules():
    """Generates rtcell/v1/*_pb2(_grpc).py from the .proto files and imports them."""
    from grpc_tools import protoc  # noqa: imported here so --help works without grpcio-tools

    out = tempfile.mkdtemp(prefix="rtcell-proto-")
    files = ["rtcell/v1/gateway.proto", "rtcell/v1/stats.proto"]
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}"] + files)
    if rc != 0:
        sys.exit(f"error: protoc failed on {PROTO_ROOT} (exit {rc})")
    sys.path.insert(0, out)
    return importlib.import_module("rtcell.v1.gateway_pb2"), importlib.import_module("rtcell.v1.gateway_pb2_grpc")


def default_target():
    if os.environ.get("RTCELL_GATEWAY"):
        return os.environ["RTCELL_GATEWAY"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return "unix:" + os.path.join(runtime, "rtcell", "gateway.sock")
    if os.getuid() == 0:
        return "unix:/run/rtcell/gateway.sock"
    return f"unix:/tmp/rtcell-{os.getuid()}/gateway.sock"


def channel(args):
    import grpc

    target = args.connect or default_target()
    if target.startswith("/"):
        target = "unix:" + target
    if target.startswith("tcp://"):
        target = target[len("tcp://"):]
    if target.startswith("unix:"):
        # grpc-core would send the percent-encoded socket path as :authority, which HTTP/2 servers
        # built on hyper (the gateway's) refuse; any plain host name will do.
        return grpc.insecure_channel(target, options=[("grpc.default_authority", "localhost")]), []
    metadata = []
    if args.token_file:
        with open(args.token_file) as f:
            metadata.append(("authorization", "Bearer " + f.read().strip()))
    if args.tls_ca:
        def read(p):
            with open(p, "rb") as f:
                return f.read()

        creds = grpc.ssl_channel_credentials(read(args.tls_ca), read(args.tls_key), read(args.tls_cert))
        return grpc.secure_channel(target, creds), metadata
    return grpc.insecure_channel(target), metadata


def hist(h):
    return {"count": h.count, "p50_ns": h.p50_ns, "p999_ns": h.p999_ns, "max_ns": h.max_ns}


def stats_dict(s):
    return {
        "run_id": s.run_id,
        "elapsed_s": s.elapsed_s,
        "finished": s.finished,
        "tasks": [
            {"name": t.name, "cell": t.cell, "state": t.state, "cycles": t.cycles, "overruns": t.overruns,
             "latency": hist(t.latency), "exec": hist(t.exec)}
            for t in s.tasks
        ],
        "channels": [{"name": c.name, "sent": c.sent, "received": c.received, "lost": c.lost} for c in s.channels],
        "cells": [{"name": c.name, "kind": c.kind, "cpu": c.cpu, "status": c.status} for c in s.cells],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--connect", help="unix:PATH, a socket path, or HOST:PORT (default: $RTCELL_GATEWAY or the default socket)")
    p.add_argument("--token-file")
    p.add_argument("--tls-ca")
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status")
    sub.add_parser("stats")
    w = sub.add_parser("watch")
    w.add_argument("--rate", type=float, default=1.0)
    w.add_argument("--count", type=int, default=5)
    g = sub.add_parser("get")
    g.add_argument("signal")
    s = sub.add_parser("set")
    s.add_argument("signal")
    s.add_argument("values", nargs="+")
    args = p.parse_args()

    import grpc

    pb, rpc = generated_modules()
    ch, md = channel(args)
    stub = rpc.GatewayStub(ch)
    try:
        if args.cmd == "status":
            st = stub.GetStatus(pb.GetStatusRequest(), metadata=md, timeout=10)
            out = {
                "server_version": st.server_version,
                "run": {"run_id": st.run.run_id, "scenario": st.run.scenario, "state": st.run.state} if st.HasField("run") else None,
                "tasks": [t.name for t in st.tasks],
                "signals": [{"name": x.name, "writable": x.writable, "type": x.type} for x in st.signals],
            }
        elif args.cmd == "stats":
            out = stats_dict(stub.GetStats(pb.GetStatsRequest(), metadata=md, timeout=10))
        elif args.cmd == "watch":
            req = pb.StreamStatsRequest(rate_hz=args.rate, count=args.count)
            out = [stats_dict(s) for s in stub.StreamStats(req, metadata=md, timeout=60)]
        elif args.cmd == "get":
            v = stub.ReadSignal(pb.ReadSignalRequest(name=args.signal), metadata=md, timeout=10)
            out = {"name": v.name, "values": list(v.values), "seq": v.seq}
        else:
            # The signal's declared type decides how each value is sent.
            info = stub.ReadSignal(pb.ReadSignalRequest(name=args.signal), metadata=md, timeout=10).info
            values = []
            for text in args.values:
                if info.type == "i64":
                    values.append(pb.Value(i64=int(text)))
                elif info.type == "bool":
                    values.append(pb.Value(bool=text.lower() in ("1", "true", "on")))
                else:
                    values.append(pb.Value(f64=float(text)))
            ack = stub.WriteSignal(pb.WriteSignalRequest(name=args.signal, values=values), metadata=md, timeout=15)
            out = {"name": ack.name, "seq": ack.seq, "seen": list(ack.seen), "task": ack.task, "ack_ns": ack.ack_ns}
    except grpc.RpcError as e:
        print(f"error: {e.code().name.lower()}: {e.details()}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
