"""Host kinds in benchmark.yaml: ssh hosts, docker sandboxes and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from resenv.engine.hosts.build import build_hosts
from resenv.engine.hosts.pool import Host, HostPool
from resenv.engine.spec import SpecError, SshHost, loads_benchmark

SUITE = """suites: {s: {repos: [{id: r, source: {git: "https://example.invalid/r.git", commit: "%s"},
  entrypoints: {cpu: {command: x}}, not_applicable: {single_gpu: n, multi_gpu: n}}]}}
defaults: {suite: s, host: a}
""" % ("a" * 40)


def load(hosts: str):
    return loads_benchmark("version: 1\nhosts:\n" + hosts + SUITE, Path("."))


def test_ssh_host_defaults_are_strict_and_key_only():
    bench = load("  a: {kind: ssh, address: 10.0.0.5}\n")
    host = bench.host("a")
    assert isinstance(host, SshHost)
    assert (host.port, host.strict_host_keys, host.sandbox, host.max_sessions, host.gpus) == (22, True, "process", 10, "auto")
    assert host.docker.network == "none" and host.docker.memlock is None and host.docker.socket is None


def test_docker_limits_left_out_or_null_keep_the_daemons_and_nonsense_is_refused():
    bench = load("  a: {kind: local, sandbox: docker, image: i, docker: {memlock: null, socket: unix:///run/d.sock}}\n"
                 "  b: {kind: local, sandbox: docker, image: i, docker: {memlock: -1, socket: /run/d.sock}}\n")
    assert bench.host("a").docker.memlock is None and bench.host("b").docker.memlock == -1
    assert bench.host("a").docker.socket == bench.host("b").docker.socket == "/run/d.sock"
    with pytest.raises(SpecError) as error:
        load("  a: {kind: local, sandbox: docker, image: i, docker: {memlock: -2}}\n"
             "  b: {kind: local, sandbox: docker, image: i, docker: {memlock: 0}}\n"
             "  c: {kind: local, sandbox: docker, image: i, docker: {memlock: '64m', socket: run/d.sock}}\n")
    text = "\n".join(f"{issue.line}: {issue.path}: {issue.message}" for issue in error.value.issues)
    assert "3: hosts.a.docker.memlock: expected -1 (unlimited) or a number of bytes >= 1, got -2" in text, text
    assert "4: hosts.b.docker.memlock: expected -1 (unlimited) or a number of bytes >= 1, got 0" in text, text
    assert "5: hosts.c.docker.memlock: " in text and "5: hosts.c.docker.socket: expected the absolute path" in text, text


def test_every_host_problem_is_reported_with_its_line():
    with pytest.raises(SpecError) as error:
        load("  a: {kind: ssh}\n  b: {kind: ssh, address: h, sandbox: docker}\n"
             "  c: {kind: local, sandbox: docker, image: i, docker: {network: bridge}}\n"
             "  d: {kind: pbs}\n  e: {kind: ssh, address: h, password: x}\n")
    text = "\n".join(f"{issue.line}: {issue.path}: {issue.message}" for issue in error.value.issues)
    assert "3: hosts.a.address: " in text
    assert "4: hosts.b: sandbox: docker needs `image:`" in text
    assert "5: hosts.c.docker.network: expected 'none' or 'host'" in text
    assert "6: hosts.d.kind: unknown kind 'pbs'; known host kinds: local, ssh, slurm" in text
    assert "7: hosts.e.password: unknown key 'password'" in text


def test_an_ssh_hosts_data_dir_is_optional_absolute_and_one_line():
    bench = load("  a: {kind: ssh, address: h}\n  b: {kind: ssh, address: h, data_dir: /srv/resenv/}\n")
    assert bench.host("a").data_dir is None  # the remote user's XDG data dir, resolved on the host
    assert bench.host("b").data_dir == "/srv/resenv"
    with pytest.raises(SpecError) as error:
        load("  a: {kind: ssh, address: h, data_dir: srv/resenv}\n  b: {kind: ssh, address: h, data_dir: ''}\n")
    lines = [f"{issue.line}: {issue.path}: {issue.message}" for issue in error.value.issues]
    assert "3: hosts.a.data_dir: expected an absolute path on the host (it starts with /), got 'srv/resenv'" in lines
    assert "4: hosts.b.data_dir: expected an absolute path on the host, got an empty value" in lines
    assert all("\n" not in issue.message for issue in error.value.issues)


def test_build_hosts_makes_ssh_hosts_that_are_down_until_connected():
    bench = load("  a: {kind: ssh, address: 127.0.0.1, gpus: 2}\n  b: {kind: local, gpus: 0}\n")
    hosts = build_hosts(dict(bench.hosts))
    ssh, local = hosts
    assert ssh.kind == "ssh" and ssh.gpu_ids == [0, 1] and not ssh.available()
    assert local.available() and local.spec.sandbox == "process"
    pool = HostPool(hosts)
    lease = pool.lease(0)
    assert lease is not None and lease.host is local  # the down host is never chosen
    assert pool.lease(1) is None  # GPU work waits for the GPU host to come up


def test_a_down_host_is_skipped_and_chosen_again_once_back():
    class Flaky(Host):
        up = False

        def available(self) -> bool:
            return self.up

    flaky = Flaky(name="f", kind="ssh", slots=1, gpu_ids=[0])
    pool = HostPool([flaky])
    assert pool.lease(1) is None
    flaky.up = True
    assert pool.lease(1).host is flaky
