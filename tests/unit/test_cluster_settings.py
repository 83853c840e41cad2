"""The cluster variables of a profile (SPARKSERVE_NNODES, SPARKSERVE_NODE_RANK, SPARKSERVE_MASTER_ADDR,
SPARKSERVE_MASTER_PORT, TENSOR_PARALLEL_SIZE): typed, checked against each other before vLLM starts (exit 2
naming what to set), and the flags each node rank gives vLLM."""

from __future__ import annotations

import pytest

from sparkserve.serving import cluster, flags
from sparkserve.serving.checkpoint import name_says_gpt_oss
from sparkserve.serving.profile import Profile, ProfileError, parse

HEAD = {"SPARKSERVE_NNODES": "2", "SPARKSERVE_NODE_RANK": "0", "SPARKSERVE_MASTER_ADDR": "10.0.0.1",
        "SPARKSERVE_MASTER_PORT": "29501"}
WORKER = {**HEAD, "SPARKSERVE_NODE_RANK": "1"}


def resolve(env: dict[str, str]) -> Profile:
    return parse(env, gpt_oss=name_says_gpt_oss)


def refusal(env: dict[str, str]) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        resolve(env)
    return info.value


def test_one_node_is_the_default_and_emits_no_cluster_flag() -> None:
    p = resolve({})
    assert (p.nnodes, p.node_rank, p.master_addr, p.master_port) == (1, 0, "", 29501)
    assert p.tensor_parallel_size == 1
    argv = set(flags.profile_args(p))
    assert not {"--nnodes", "--node-rank", "--master-addr", "--master-port", "--tensor-parallel-size"} & argv
    assert not cluster.is_worker(p.nnodes, p.node_rank)


def test_two_nodes_give_vllm_the_cluster_flags_the_role_gave_it() -> None:
    """What ansible's serve role passed in VLLM_EXTRA_ARGS: TP over the nodes, one GPU each."""
    argv = flags.profile_args(resolve(WORKER))
    start = argv.index("--nnodes")
    assert argv[start:start + 10] == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
                                      "--master-port", "29501", "--tensor-parallel-size", "2"]


@pytest.mark.parametrize(("env", "var", "says"), [
    ({**HEAD, "SPARKSERVE_NODE_RANK": "2"}, "SPARKSERVE_NODE_RANK",
     "with SPARKSERVE_NNODES=2 the node ranks are 0 to 1"),
    ({"SPARKSERVE_NODE_RANK": "1"}, "SPARKSERVE_NODE_RANK", "set SPARKSERVE_NODE_RANK to this node's index"),
    ({"SPARKSERVE_NNODES": "2"}, "SPARKSERVE_MASTER_ADDR",
     "needs the head's address: set SPARKSERVE_MASTER_ADDR to the IP of node rank 0"),
    ({**HEAD, "SPARKSERVE_MASTER_ADDR": "spark-1"}, "SPARKSERVE_MASTER_ADDR", "must be an IP address"),
    ({**HEAD, "SPARKSERVE_MASTER_PORT": "0"}, "SPARKSERVE_MASTER_PORT", "must be from 1 to 65535"),
    ({**HEAD, "SPARKSERVE_MASTER_PORT": "65536"}, "SPARKSERVE_MASTER_PORT", "must be from 1 to 65535"),
    ({**HEAD, "SPARKSERVE_MASTER_PORT": "8000"}, "SPARKSERVE_MASTER_PORT",
     "is SPARKSERVE_PORT too, and the head listens on both"),
    ({"SPARKSERVE_MASTER_ADDR": "10.0.0.1"}, "SPARKSERVE_MASTER_ADDR", "SPARKSERVE_NNODES=1 (one node)"),
    ({"SPARKSERVE_MASTER_PORT": "29501"}, "SPARKSERVE_MASTER_PORT",
     "remove the line, or set SPARKSERVE_NNODES"),
    ({**HEAD, "TENSOR_PARALLEL_SIZE": "3"}, "TENSOR_PARALLEL_SIZE", "set a multiple of 2"),
    ({"SPARKSERVE_NNODES": "0"}, "SPARKSERVE_NNODES", "must be at least 1"),
])
def test_a_cluster_that_cannot_work_is_refused_naming_what_to_set(env: dict[str, str], var: str,
                                                                    says: str) -> None:
    exc = refusal(env)
    assert exc.variable == var and says in exc.why, exc


def test_the_worker_may_share_the_api_port_number_with_the_rendezvous() -> None:
    """Only the head listens on both; a worker runs no API server."""
    assert resolve({**WORKER, "SPARKSERVE_MASTER_PORT": "8000"}).master_port == 8000


def test_more_gpus_per_node_is_a_multiple_of_the_nodes() -> None:
    assert resolve({**HEAD, "TENSOR_PARALLEL_SIZE": "4"}).tensor_parallel_size == 4
    assert resolve({"TENSOR_PARALLEL_SIZE": "2"}).tensor_parallel_size == 2  # two GPUs of one machine


@pytest.mark.parametrize(("nnodes", "rank", "named"), [
    (2, 0, "node rank 1"), (2, 1, "node rank 0 (the head)"), (4, 0, "one of node ranks 1, 2, 3"),
    (3, 2, "one of node ranks 0, 1"), (1, 0, "no other node")])
def test_the_other_ranks_are_named(nnodes: int, rank: int, named: str) -> None:
    assert cluster.others(nnodes, rank) == named
