"""Two-rank all-reduce between the cluster's hosts, with the environment the serving containers get.

Run by the cluster role inside the serving image (stdin), one rank per host, before vLLM starts:
  python - --rank R --world 2 --master-addr HEAD --master-port P --backend nccl|gloo
nccl on the Sparks (GPU tensors over the CX-7 port named by NCCL_IB_HCA / NCCL_SOCKET_IFNAME); gloo on
CPU test hosts (GLOO_SOCKET_IFNAME). Every rank checks the sum; exit 0 only when it is right.
"""

import argparse
import datetime
import fcntl
import json
import os
import socket
import struct
import sys
import time


def iface_address(name):
    """IPv4 address of a network interface (proves which one the settings name)."""
    if not name:
        return ""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except OSError as exc:
        return "no address (%s)" % exc.strerror
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--master-addr", required=True)
    ap.add_argument("--master-port", type=int, required=True)
    ap.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--timeout", type=int, default=180)
    a = ap.parse_args()

    import torch
    import torch.distributed as dist

    iface = os.environ.get("NCCL_SOCKET_IFNAME" if a.backend == "nccl" else "GLOO_SOCKET_IFNAME", "")
    print("allreduce rank %d: %s via %s (%s), HCA %s, master %s:%d" % (
        a.rank, a.backend, iface, iface_address(iface), os.environ.get("NCCL_IB_HCA", "-"),
        a.master_addr, a.master_port), flush=True)
    dist.init_process_group(a.backend, init_method="tcp://%s:%d" % (a.master_addr, a.master_port),
                            rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.timeout))
    device = "cuda:0" if a.backend == "nccl" else "cpu"
    n = a.mb * 1024 * 1024 // 4
    x = torch.full((n,), float(a.rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(x)  # warm-up and correctness
    want = float(a.world * (a.world + 1) // 2)
    ok = bool(torch.all(x == want).item())
    if device != "cpu":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    dist.all_reduce(x)
    if device != "cpu":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    # bus bandwidth of a ring all-reduce: 2 (n-1)/n of the buffer crosses the link
    busbw = 2 * (a.world - 1) / a.world * n * 4 / dt / 1e9
    print("allreduce " + json.dumps({"rank": a.rank, "backend": a.backend, "iface": iface, "ok": ok,
                                     "mb": a.mb, "seconds": round(dt, 4), "busbw_gb_s": round(busbw, 2)}),
          flush=True)
    dist.destroy_process_group()
    if not ok:
        print("allreduce rank %d: wrong sum, expected %s everywhere" % (a.rank, want), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
