"""HostPool leasing: slots and GPU ids per host, never split, never leased twice."""

from __future__ import annotations

import random

import pytest

from resenv.engine.hosts.build import build_hosts
from resenv.engine.hosts.pool import Host, HostPool, Lease
from resenv.engine.spec import LocalHost


def host(name: str, gpus: list[int], slots: int = 4) -> Host:
    return Host(name=name, kind="local", slots=slots, gpu_ids=list(gpus))


def test_a_pinned_lease_goes_only_to_its_host_and_gets_at_most_the_gpus_it_has():
    pair, single, cpu = host("pair", [0, 1]), host("single", [0]), host("cpu", [], slots=1)
    pool = HostPool([pair, single, cpu])
    on_single = pool.lease(2, on="single")  # where a kept state lives: never another host
    assert on_single is not None and on_single.host is single and on_single.gpus == (0,)
    assert pool.lease(1, on="single") is None  # its one GPU is taken: wait, even though `pair` is free
    on_cpu = pool.lease(1, on="cpu")
    assert on_cpu is not None and on_cpu.host is cpu and on_cpu.gpus == ()
    assert pool.lease(0, on="cpu") is None  # its one slot is taken
    assert pool.lease(0, on="gone") is None

def test_two_gpu_job_waits_for_two_free_gpus_on_one_host_never_split():
    pair = host("pair", [0, 1])
    single = host("single", [0])
    pool = HostPool([pair, single])
    first = pool.lease(1)
    assert first is not None and first.host is pair and len(first.gpus) == 1
    # one GPU free on `pair` and one on `single`: two free in all, but not on one host
    assert len(pair.free_gpus) + len(single.free_gpus) == 2
    assert pool.lease(2) is None
    assert pool.lease(2) is None  # asking again changes nothing
    pool.release(first)
    second = pool.lease(2)
    assert second is not None and second.host is pair and sorted(second.gpus) == [0, 1]
    assert pair.free_gpus == [] and single.free_gpus == [0]


def test_gpu_less_host_never_gets_gpu_work_while_a_gpu_host_exists():
    cpu = host("cpu", [], slots=8)
    gpu = host("gpu", [7], slots=8)
    pool = HostPool([cpu, gpu])
    lease = pool.lease(1)
    assert lease is not None and lease.host is gpu and lease.gpus == (7,)
    # the only GPU is taken: 1- and 2-GPU work waits, however many CPU slots are free
    assert pool.lease(1) is None
    assert pool.lease(2) is None
    assert cpu.busy_slots == 0
    pool.release(lease)
    again = pool.lease(2)  # needs 2, the biggest host has 1: it gets that one, on the GPU host
    assert again is not None and again.host is gpu and again.gpus == (7,)


def test_cpu_work_prefers_gpu_less_hosts_then_spills_over():
    gpu = host("gpu", [0, 1], slots=2)
    cpu = host("cpu", [], slots=2)
    pool = HostPool([gpu, cpu])  # the GPU host is listed first and is idle
    a = pool.lease(0)
    b = pool.lease(0)  # the CPU host is now busier than the idle GPU host, and still preferred
    assert a is not None and b is not None
    assert (a.host, b.host) == (cpu, cpu) and a.gpus == b.gpus == ()
    c = pool.lease(0)  # no CPU-host slot left: CPU work may use a GPU host's slot, but no GPU
    assert c is not None and c.host is gpu and c.gpus == ()
    assert gpu.free_gpus == [0, 1]
    d = pool.lease(2)  # the GPU host still has one slot and both GPUs
    assert d is not None and d.host is gpu and sorted(d.gpus) == [0, 1]
    assert pool.lease(0) is None  # every slot taken
    pool.release(a)
    e = pool.lease(0)
    assert e is not None and e.host is cpu


def test_cpu_work_prefers_the_least_busy_gpu_less_host():
    small = host("small", [], slots=1)
    large = host("large", [], slots=4)
    pool = HostPool([small, large])
    leases = [pool.lease(0) for _ in range(5)]
    assert all(lease is not None for lease in leases)
    assert small.busy_slots == 1 and large.busy_slots == 4
    assert pool.lease(0) is None


def test_insufficient_gpus_everywhere_leases_what_the_biggest_host_has():
    cpu = host("cpu", [], slots=4)
    one = host("one", [3], slots=4)
    pool = HostPool([cpu, one])
    assert pool.grantable(2) == 1
    assert pool.grantable(1) == 1
    assert pool.grantable(0) == 0
    lease = pool.lease(2)
    assert lease is not None and lease.host is one and lease.gpus == (3,)
    assert pool.lease(2) is None  # the one GPU is taken; the GPU-less host does not take it
    pool.release(lease)

    # three hosts, the biggest has 2: a 4-GPU job goes there and gets both
    trio = HostPool([host("a", [0]), host("b", [0, 1]), host("c", [])])
    assert trio.grantable(4) == 2
    big = trio.lease(4)
    assert big is not None and big.host.name == "b" and sorted(big.gpus) == [0, 1]
    assert trio.lease(4) is None
    # a run with no GPU at all: GPU work runs on a CPU host with no GPU (its tiers are skipped later)
    none = HostPool([host("c", [])])
    assert none.grantable(2) == 0
    bare = none.lease(2)
    assert bare is not None and bare.gpus == ()


def test_slots_limit_jobs_per_host():
    only = host("only", [0, 1, 2, 3], slots=2)
    pool = HostPool([only])
    a = pool.lease(1)
    b = pool.lease(0)
    assert a is not None and b is not None
    # two GPUs are still free, but both slots are taken
    assert len(only.free_gpus) == 3
    assert pool.lease(1) is None
    assert pool.lease(0) is None
    pool.release(b)
    c = pool.lease(2)
    assert c is not None and len(c.gpus) == 2 and not set(c.gpus) & set(a.gpus)


def test_release_returns_gpus_and_slot():
    h = host("h", [4, 5, 6], slots=3)
    pool = HostPool([h])
    a = pool.lease(2)
    b = pool.lease(1)
    assert a is not None and b is not None
    assert h.free_gpus == [] and h.busy_slots == 2
    pool.release(a)
    assert sorted(h.free_gpus) == sorted(a.gpus) and h.busy_slots == 1
    pool.release(b)
    assert h.free_gpus == [4, 5, 6] and h.busy_slots == 0 and h.leased_gpus == set()


def test_build_hosts_from_spec_count_list_and_zero():
    hosts = build_hosts({
        "pair": LocalHost(kind="local", slots=3, gpus=[2, 5]),
        "count": LocalHost(kind="local", gpus=2),
        "none": LocalHost(kind="local", gpus=0),
    })
    assert [(h.name, h.slots, h.gpu_ids) for h in hosts] == [
        ("pair", 3, [2, 5]), ("count", 2, [0, 1]), ("none", 2, []),
    ]


def test_empty_pool_is_refused():
    with pytest.raises(ValueError):
        HostPool([])


def _fits(h: Host, want: int) -> bool:
    return h.busy_slots < h.slots and len(h.gpu_ids) >= want and len(h.free_gpus) >= want


def _check_invariants(pool: HostPool, active: list[Lease]) -> None:
    for h in pool.hosts:
        mine = [lease for lease in active if lease.host is h]
        assert h.busy_slots == len(mine) <= h.slots
        gpus = [gpu for lease in mine for gpu in lease.gpus]
        assert len(gpus) == len(set(gpus)), f"GPU leased twice on {h.name}: {gpus}"
        assert set(gpus) == h.leased_gpus
        assert set(gpus) <= set(h.gpu_ids)


@pytest.mark.parametrize("seed", [1, 2, 3, 5, 8, 13, 21, 34])
def test_random_lease_release_never_double_leases(seed):
    rng = random.Random(seed)
    hosts = [
        host(f"h{i}", rng.sample(range(8), rng.choice([0, 0, 1, 2, 3, 4])), slots=rng.randint(1, 3))
        for i in range(rng.randint(1, 4))
    ]
    pool = HostPool(hosts)
    max_gpus = max(len(h.gpu_ids) for h in hosts)
    has_gpu_host = max_gpus > 0
    active: list[Lease] = []
    granted = refused = 0
    for _ in range(600):
        if active and rng.random() < 0.45:
            lease = active.pop(rng.randrange(len(active)))
            pool.release(lease)
        else:
            needed = rng.choice([0, 0, 1, 1, 2, 3, 4])
            want = min(needed, max_gpus)
            could = [h for h in hosts if _fits(h, want)]
            lease = pool.lease(needed)
            if lease is None:
                refused += 1
                assert not could, f"refused {needed} GPUs although {[h.name for h in could]} fit"
            else:
                granted += 1
                assert lease.host in could
                assert len(lease.gpus) == want == pool.grantable(needed)
                assert len(set(lease.gpus)) == len(lease.gpus)
                if want > 0:
                    assert lease.host.gpu_ids, "GPU work on a GPU-less host"
                elif lease.host.gpu_ids:
                    assert not [h for h in could if not h.gpu_ids], "CPU work on a GPU host while a CPU host had a slot"
                if needed > 0 and has_gpu_host:
                    assert lease.host.gpu_ids
                active.append(lease)
        _check_invariants(pool, active)
    for lease in active:
        pool.release(lease)
    _check_invariants(pool, [])
    assert granted > 50 and refused + granted > 300
