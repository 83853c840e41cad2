"""One model served from several nodes: vLLM's own multi-node runtime (no Ray), one GPU per node on DGX
Sparks. The rules between the cluster variables of a profile (declared in serving/settings.py) and what a
node rank is: rank 0 is the head (vLLM's API server and the engine core that drives every rank), a rank
above 0 is a headless worker (`vllm serve --headless`: GPU workers only, no API server, no /health).

Each rule names the variable to set; parse() turns a refusal into the entrypoint's exit 2.
"""

from __future__ import annotations

from sparkserve.serving.kinds import Context, ProfileError

# vLLM's own default rendezvous port (ParallelConfig.master_port): torch.distributed's store on the head.
DEFAULT_MASTER_PORT = 29501


def is_worker(nnodes: int, rank: int) -> bool:
    """A node of this rank is a headless worker."""
    return nnodes > 1 and rank > 0


def others(nnodes: int, rank: int) -> str:
    """The node ranks other than `rank`, as a message names them."""
    ranks = [r for r in range(nnodes) if r != rank]
    if not ranks:
        return "no other node"
    if ranks == [0]:
        return "node rank 0 (the head)"
    if len(ranks) == 1:
        return f"node rank {ranks[0]}"
    return "one of node ranks " + ", ".join(map(str, ranks))


def rendezvous_url(master_addr: str, master_port: int) -> str:
    """The head's rendezvous (torch.distributed's store) as a tcp:// URL for serving/health.py's probe."""
    host = f"[{master_addr}]" if ":" in master_addr else master_addr
    return f"tcp://{host}:{master_port}"


def describe(nnodes: int, rank: int, master_addr: str, master_port: int) -> str:
    """A node's place in the cluster, for the entrypoint's start lines."""
    head = f"{master_addr}:{master_port}"
    if rank == 0:
        return f"node rank 0 of {nnodes}, the head (API server and engine; the ranks meet at {head})"
    return f"node rank {rank} of {nnodes}, a headless worker (no API server) of the head at {head}"


def check_node_rank(rank: int, ctx: Context) -> None:
    nnodes = ctx["nnodes"]
    if rank >= nnodes:
        raise ProfileError("SPARKSERVE_NODE_RANK", str(rank),
                           f"with SPARKSERVE_NNODES={nnodes} the node ranks are 0 to {nnodes - 1} (0: the "
                           "head, which runs the API server); set SPARKSERVE_NODE_RANK to this node's index, "
                           "or SPARKSERVE_NNODES to the number of nodes")


def _only_in_a_cluster(var: str, ctx: Context) -> None:
    """A cluster variable a single node sets is a mistake (a profile copied from the other node), not a
    no-op."""
    if var in ctx.env and ctx["nnodes"] == 1:
        raise ProfileError(var, ctx.env[var], "is for serving from several nodes, and SPARKSERVE_NNODES=1 "
                                              "(one node); remove the line, or set SPARKSERVE_NNODES")


def check_master_addr(addr: str, ctx: Context) -> None:
    _only_in_a_cluster("SPARKSERVE_MASTER_ADDR", ctx)
    if ctx["nnodes"] > 1 and not addr:
        raise ProfileError("SPARKSERVE_MASTER_ADDR", addr,
                           f"SPARKSERVE_NNODES={ctx['nnodes']} needs the head's address: set "
                           "SPARKSERVE_MASTER_ADDR to the IP of node rank 0 on the link between the nodes "
                           "(the same on every node)")


def check_master_port(port: int, ctx: Context) -> None:
    _only_in_a_cluster("SPARKSERVE_MASTER_PORT", ctx)
    # With host networking the head listens on both: the API and torch.distributed's store.
    if ctx["nnodes"] > 1 and ctx["node_rank"] == 0 and port == ctx["port"]:
        raise ProfileError("SPARKSERVE_MASTER_PORT", str(port),
                           "is SPARKSERVE_PORT too, and the head listens on both (the API and the "
                           f"rendezvous of the ranks); set another SPARKSERVE_MASTER_PORT (vLLM's default: "
                           f"{DEFAULT_MASTER_PORT})")


def check_tensor_parallel(size: int, ctx: Context) -> None:
    nnodes = ctx["nnodes"]
    if size % nnodes:
        raise ProfileError("TENSOR_PARALLEL_SIZE", str(size),
                           f"vLLM puts the same number of tensor-parallel ranks on each of the "
                           f"SPARKSERVE_NNODES={nnodes} nodes; set a multiple of {nnodes} (one GPU per node, "
                           f"as on DGX Sparks: {nnodes})")
