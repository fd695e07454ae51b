"""The fault suite's harness: the whole change-detection path as real processes, a customer
workload, and the convergence check (tests/faults).

``Stack``: one runtime of its own (a Kyma CR in the KCP and a client certificate), a fresh
SKR namespace and label selector, and the real processes: the listener (gunicorn, mTLS)
behind a ``partition.Partition`` proxy (the listener's Service: the webhook and the pollers send
through it, so the listener can be restarted, killed or cut off), the webhook (gunicorn,
TLS) registered in the SKR apiserver from the manifest (``failurePolicy: Ignore``, its
``timeoutSeconds``), and one or two leader-elected ``tether poller`` processes with a short
interval. Every part's settings can be overridden per test.

``Workload``: a customer writing ConfigMaps (create, update, delete) at a steady rate in a
background thread, recording every write's result and its own model of the final state.

``Stack.wait_converged``: polls until the KCP's RuntimeConfigMaps of the runtime equal its
ConfigMaps exactly (same keys live, same uid, resourceVersion, data, labels, annotations;
the deleted ones tombstoned or absent), bounded, with the difference in the failure;
``finish`` ends a fault test with it (the customer stopped, its writes checked, the report).

``CompassProcess``: ``tether compass`` as a subprocess (the Director stand-in is the
caller's, in-process, so faults can be switched).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

import requests
from kubernetes import client

from testing import controlplane, listenerenv, localnet, partition, pollerenv, webhookstack

REPO = controlplane.REPO_ROOT
POLL_INTERVAL = 3.0  # the pollers' interval in the fault suite


# -- processes ---------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """``pid``'s children, grandchildren, ... (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(popen: subprocess.Popen[Any]) -> None:
    """SIGKILL a process and all its descendants at once (a container killed: gunicorn's
    master and its workers die together, nothing is drained or released)."""
    pids = [popen.pid, *descendants(popen.pid)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)  # no more forks while we collect
    pids = [popen.pid, *descendants(popen.pid)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    popen.wait(10)
    deadline = time.monotonic() + 10
    while any(pathlib.Path(f"/proc/{p}").exists() and _alive(p) for p in pids[1:]):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {pids} survived SIGKILL")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class FixedPortListener(listenerenv.ListenerProcess):
    """A listener on a given port (a restarted pod behind the same Service)."""

    def __init__(self, env: listenerenv.Env, name: str, port: int, **overrides: str) -> None:
        self._fixed = port
        super().__init__(env, name, TETHER_LISTENER_BIND=f"127.0.0.1:{port}", **overrides)

    def _wait(self) -> None:
        self.port, self.url = self._fixed, f"https://127.0.0.1:{self._fixed}"
        super()._wait()

    def kill(self) -> None:
        kill_tree(self.proc)
        self.stop()  # closes the log file; the process is gone


def tail(path: pathlib.Path, n: int = 2500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


# -- the stack ---------------------------------------------------------------------------


class Stack:
    """One runtime's change-detection path on the fault suite's planes (see the module)."""

    def __init__(
        self,
        skr: controlplane.ControlPlane,
        env: listenerenv.Env,
        workdir: pathlib.Path,
        *,
        pollers: int = 1,
        webhook: dict[str, str] | None = None,
        poller: dict[str, str] | None = None,
        listener: dict[str, str] | None = None,
    ) -> None:
        self.skr, self.env, self.dir = skr, env, workdir
        self.api = skr.api_client()
        self.core = client.CoreV1Api(self.api)
        self.runtime = listenerenv.add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")
        self.namespace = f"f-{uuid.uuid4().hex[:8]}"
        self.labels, self.selector = pollerenv.unique_selector()
        self.listener_port = controlplane.free_port()
        self.listener_overrides = dict(listener or {})
        self.proxy = partition.Partition(("127.0.0.1", self.listener_port))
        self.listener: FixedPortListener | None = None
        self._incarnation = 0
        self.webhook_env = {
            "TETHER_RUNTIME_ID": self.runtime.id,
            "TETHER_LISTENER_URL": self.proxy.url,
            "TETHER_LISTENER_CA_FILE": str(env.server_ca_file),
            "TETHER_CLIENT_CERT_FILE": str(self.runtime.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(self.runtime.key_file),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            "TETHER_LABEL_SELECTOR": self.selector,
            "TETHER_LISTENER_CONNECT_TIMEOUT_SECONDS": "1",
            "TETHER_LISTENER_TIMEOUT_SECONDS": "2",
            "TETHER_WEBHOOK_RETRY_BASE_SECONDS": "0.1",
            "TETHER_WEBHOOK_RETRY_CAP_SECONDS": "2",
            **(webhook or {}),
        }
        self.webhook: webhookstack.WebhookProcess | None = None
        self.vwc_name = f"tether-fault-{self.namespace}"
        suite = dict(  # the suite's intervals; a test's ``poller`` settings replace them
            TETHER_POLLER_INTERVAL_SECONDS=str(POLL_INTERVAL),
            TETHER_POLLER_JITTER_SECONDS="0.3",
            TETHER_POLLER_LEASE_DURATION_SECONDS="3",
            TETHER_POLLER_RENEW_DEADLINE_SECONDS="2",
            TETHER_POLLER_RETRY_PERIOD_SECONDS="0.5",
            TETHER_POLLER_BACKOFF_BASE_SECONDS="1",
            TETHER_POLLER_BACKOFF_CAP_SECONDS="3",
            TETHER_POLLER_SEND_ATTEMPTS="2",
            TETHER_POLLER_RETRY_BASE_SECONDS="0.2",
            TETHER_POLLER_RETRY_CAP_SECONDS="1",
            TETHER_POLLER_LIST_TIMEOUT_SECONDS="5",
            TETHER_LISTENER_CONNECT_TIMEOUT_SECONDS="1",
            TETHER_LISTENER_TIMEOUT_SECONDS="3",
        )
        self.poller_env = pollerenv.poller_env(
            self.runtime,
            self.proxy.url,
            skr,
            self.selector,
            self.namespace,
            **{**suite, **(poller or {})},
        )
        self.poller_count = pollers
        self.pollers: list[pollerenv.PollerProcess] = []

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> Stack:
        try:
            controlplane.retry_busy(
                lambda: self.core.create_namespace(
                    client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace))
                )
            )
            self.start_listener()
            self.webhook = webhookstack.WebhookProcess(self.dir, self.webhook_env).start()
            body = webhookstack.vwc_body(
                self.vwc_name,
                self.webhook.url + "/validate",
                self.webhook.ca.cert_pem,
                self.namespace,
            )
            hook = body["webhooks"][0]
            assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Ignore", 2), hook
            webhookstack.register(self.api, body)
            self._wait_webhook_called()
            for i in range(self.poller_count):
                self.pollers.append(
                    pollerenv.PollerProcess(self.dir, f"poller-{'ab'[i]}", self.poller_env).start()
                )
            pollerenv.wait_until(self.leader, 30, "a poller to hold the Lease")
        except BaseException:
            self.close()
            raise
        return self

    def _wait_webhook_called(self) -> None:
        """The apiserver picks a new configuration up asynchronously: write an unwatched
        ConfigMap until the webhook is called for it."""
        assert self.webhook is not None
        wh = self.webhook
        probe = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="tether-fault-probe"), data={"n": "0"}
        )
        self.core.create_namespaced_config_map(self.namespace, probe)
        before = wh.metric("tether_webhook_admission_requests_total")
        n = [0]

        def called() -> bool:
            n[0] += 1
            self.core.patch_namespaced_config_map(
                "tether-fault-probe", self.namespace, {"data": {"n": str(n[0])}}
            )
            return wh.metric("tether_webhook_admission_requests_total") > before

        pollerenv.wait_until(
            called, 30, f"the apiserver to call the webhook:\n{wh.log()}", interval=0.2
        )
        self.core.delete_namespaced_config_map("tether-fault-probe", self.namespace)

    def start_listener(self) -> FixedPortListener:
        assert self.listener is None or self.listener.proc.poll() is not None
        self._incarnation += 1
        self.listener = FixedPortListener(
            self.env,
            f"{self.namespace}-{self._incarnation}",
            self.listener_port,
            **self.listener_overrides,
        )
        return self.listener

    def kill_listener(self) -> None:
        assert self.listener is not None
        self.listener.kill()

    def kill_webhook(self) -> None:
        assert self.webhook is not None and self.webhook.proc is not None
        os.killpg(self.webhook.proc.pid, signal.SIGKILL)
        self.webhook.proc.wait(10)

    def restart_webhook(self) -> None:
        assert self.webhook is not None
        self.webhook.start()  # same port, certificate and settings: the registration holds

    def leader(self) -> pollerenv.PollerProcess | None:
        try:
            lease: Any = client.CoordinationV1Api(self.api).read_namespaced_lease(
                self.poller_env["TETHER_POLLER_LEASE_NAME"], self.namespace
            )
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise
        holder = lease.spec.holder_identity
        return next(
            (
                p
                for p in self.pollers
                if p.identity == holder and p.proc is not None and p.proc.poll() is None
            ),
            None,
        )

    def close(self) -> None:
        for p in self.pollers:
            p.stop()
        if self.webhook is not None and self.webhook.proc is not None:
            self.webhook.stop()
        with contextlib.suppress(Exception):
            webhookstack.unregister(self.api, self.vwc_name)
        if self.listener is not None:
            self.listener.stop()
        self.proxy.close()
        self.api.close()

    def logs(self) -> str:
        """Tails of every process's log, for a failure message."""
        parts = []
        if self.listener is not None:
            parts.append(f"--- listener\n{tail(self.listener.log_file)}")
        if self.webhook is not None:
            parts.append(f"--- webhook\n{tail(self.webhook.log_path)}")
        parts += [f"--- {p.identity}\n{tail(p.log_path)}" for p in self.pollers]
        return "\n".join(parts)

    # -- convergence -------------------------------------------------------------------

    def difference(self, env: listenerenv.Env | None = None) -> str:
        """'' when the KCP holds exactly the runtime's state, else what differs (``env``:
        another KCP's listener environment, a runtime moved there; else the stack's)."""
        try:
            want = pollerenv.runtime_state(self.core, self.namespace, self.selector)
            live, dead = pollerenv.kcp_state(env or self.env, self.runtime.id, self.namespace)
        except Exception as e:  # an apiserver that is down or restarting: not yet
            return f"cannot compare: {type(e).__name__}: {str(e)[:200]}"
        missing = sorted(k[1] for k in want.keys() - live.keys())
        extra = sorted(k[1] for k in live.keys() - want.keys())
        stale = sorted(
            f"{k[1]} (rv {live[k]['resourceVersion']} != {want[k]['resourceVersion']})"
            for k in want.keys() & live.keys()
            if live[k] != want[k]
        )
        if not (missing or extra or stale):
            return ""
        return (
            f"{len(want)} ConfigMaps in the runtime, {len(live)} live and {len(dead)} "
            f"tombstoned records in the KCP; missing: {missing[:10]}; live but deleted: "
            f"{extra[:10]}; differing: {stale[:10]}"
        )

    def wait_converged(
        self, since: float, timeout: float = 60.0, env: listenerenv.Env | None = None
    ) -> float:
        """Seconds from ``since`` (monotonic) until the KCP holds exactly the runtime's
        state; fails after ``timeout`` with the difference and the processes' logs."""
        deadline = time.monotonic() + timeout
        while True:
            diff = self.difference(env)
            if not diff:
                return time.monotonic() - since
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the KCP did not converge to the runtime's state within "
                    f"{timeout:.0f}s: {diff}\n{self.logs()}"
                )
            time.sleep(0.25)


# -- the customer ------------------------------------------------------------------------

Op = Literal["create", "update", "delete"]


@dataclasses.dataclass
class Write:
    op: Op
    name: str
    started: float  # monotonic
    seconds: float = 0.0  # from the first attempt to success or the final failure
    attempts: int = 0
    error: str = ""  # "" when the write succeeded


class Workload:
    """A customer writing ConfigMaps at ``rate`` writes per second over ``keys`` names in
    ``namespace`` (every object labelled ``labels``), in a thread, one write at a time.

    Each step picks a name (seeded): absent, it is created; present, it is updated (3 in
    4) or deleted. Every write's result is recorded (``writes``) and the customer's model
    of the state (``expected``: name -> data) is kept.

    A *failed customer write* is one that raised (an exception or a non-2xx answer of the
    SKR apiserver) and was not retried to success. With ``retry_seconds`` 0 (every fault
    but the SKR apiserver's own restart) a write is tried once: any error is a failure.
    With ``retry_seconds`` > 0 the customer retries a write that could not reach the
    apiserver (connection errors, 5xx, 429) every 0.2 s, for at most that long since its
    first attempt, as kubectl's user would; a retried create answered 409 whose object
    holds this write's data, and a retried delete answered 404, are the earlier attempt's
    success. Any other answer (a 4xx) is a failure at once.
    """

    def __init__(
        self,
        core: client.CoreV1Api,
        namespace: str,
        labels: dict[str, str],
        *,
        keys: int = 30,
        rate: float = 10.0,
        seed: int = 0,
        retry_seconds: float = 0.0,
        update_share: float = 0.75,
    ) -> None:
        self.core, self.namespace, self.labels = core, namespace, labels
        self.names = [f"cm-{i:03d}" for i in range(keys)]
        self.rate, self.retry_seconds, self.update_share = rate, retry_seconds, update_share
        self.rng = random.Random(seed)
        self.expected: dict[str, dict[str, str]] = {}
        self.writes: list[Write] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seq = 0
        self.crashed: BaseException | None = None

    # -- running -----------------------------------------------------------------------

    def start(self) -> Workload:
        self._thread = threading.Thread(target=self._run, name="customer", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 90.0) -> float:
        """Stops after the write in progress; returns when the last write ended."""
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the customer's last write did not end"
        if self.crashed is not None:
            raise AssertionError("the workload crashed") from self.crashed
        return max((w.started + w.seconds for w in self.writes), default=time.monotonic())

    def finish(self, timeout: float = 90.0) -> float:
        """``stop``, then the checks every fault test makes: no customer write failed and
        the runtime holds exactly what was written. Returns when the last write ended."""
        last = self.stop(timeout)
        assert not self.failed(), f"customer writes failed: {self.failed()[:3]}; {self.summary()}"
        self.check_runtime()
        return last

    def wait_writes(self, n: int, timeout: float = 30.0) -> None:
        """Until ``n`` more writes than now have ended."""
        target = len(self.writes) + n
        pollerenv.wait_until(
            lambda: len(self.writes) >= target or self.crashed, timeout, f"{n} customer writes"
        )

    def _run(self) -> None:
        try:
            period = 1.0 / self.rate
            next_at = time.monotonic()
            while not self._stop.is_set():
                self.writes.append(self._step())
                next_at = max(next_at + period, time.monotonic())
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.crashed = e

    def _step(self) -> Write:
        name = self.rng.choice(self.names)
        self._seq += 1
        if name not in self.expected:
            op: Op = "create"
        else:
            op = "update" if self.rng.random() < self.update_share else "delete"
        data = {"v": str(self._seq), "name": name}
        w = Write(op, name, time.monotonic())
        call: Callable[[], Any] = {
            "create": lambda: self.core.create_namespaced_config_map(
                self.namespace,
                client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=name, labels=self.labels), data=data
                ),
                _request_timeout=(5, 15),
            ),
            "update": lambda: self.core.patch_namespaced_config_map(
                name, self.namespace, {"data": data}, _request_timeout=(5, 15)
            ),
            "delete": lambda: self.core.delete_namespaced_config_map(
                name, self.namespace, _request_timeout=(5, 15)
            ),
        }[op]
        while True:
            w.attempts += 1
            try:
                call()
                break
            except Exception as e:  # noqa: BLE001 - every error is recorded
                status = getattr(e, "status", None) if isinstance(e, client.ApiException) else None
                if w.attempts > 1 and self._earlier_attempt_succeeded(op, name, data, status):
                    break
                retryable = status is None or status >= 500 or status == 429
                if not (
                    self.retry_seconds
                    and retryable
                    and time.monotonic() - w.started < self.retry_seconds
                ):
                    w.error = f"{type(e).__name__}: {str(e)[:200]}"
                    break
                time.sleep(0.2)
        w.seconds = time.monotonic() - w.started
        if not w.error:
            if op == "delete":
                self.expected.pop(name, None)
            else:
                self.expected[name] = data
        return w

    def _earlier_attempt_succeeded(
        self, op: Op, name: str, data: dict[str, str], status: int | None
    ) -> bool:
        if op == "delete":
            return status == 404
        if op == "create" and status == 409:
            with contextlib.suppress(Exception):
                cm = self.core.read_namespaced_config_map(name, self.namespace)
                return dict(cm.data or {}) == data
        return False

    # -- results -----------------------------------------------------------------------

    def failed(self) -> list[Write]:
        return [w for w in self.writes if w.error]

    def retried(self) -> list[Write]:
        return [w for w in self.writes if w.attempts > 1 and not w.error]

    def max_seconds(self, start: float = 0.0, end: float = float("inf")) -> float:
        """The longest write that started in [start, end)."""
        return max((w.seconds for w in self.writes if start <= w.started < end), default=0.0)

    def check_runtime(self) -> None:
        """The runtime holds exactly what the customer wrote (no write lost by the SKR)."""
        resp: Any = self.core.list_namespaced_config_map(
            self.namespace, label_selector=",".join(f"{k}={v}" for k, v in self.labels.items())
        )
        actual = {cm.metadata.name: dict(cm.data or {}) for cm in resp.items}
        assert actual == self.expected, (
            f"the runtime differs from the customer's writes: only in the runtime "
            f"{sorted(actual.keys() - self.expected.keys())}, missing "
            f"{sorted(self.expected.keys() - actual.keys())}, differing "
            f"{sorted(k for k in actual.keys() & self.expected.keys() if actual[k] != self.expected[k])}"  # noqa: E501
        )

    def summary(self) -> str:
        ops = {
            op: sum(1 for w in self.writes if w.op == op) for op in ("create", "update", "delete")
        }
        return (
            f"{len(self.writes)} writes ({ops['create']} create, {ops['update']} update, "
            f"{ops['delete']} delete), {len(self.failed())} failed, {len(self.retried())} "
            f"retried, longest {self.max_seconds():.2f}s, {len(self.expected)} live at the end"
        )


# -- the end of a fault ----------------------------------------------------------------


def finish(
    s: Stack,
    w: Workload,
    report: Callable[..., None],
    *,
    fault: str,
    began: float,
    healed: float,
    timeout: float = 60.0,
    **extra: Any,
) -> float:
    """Stop the customer, check its writes and the runtime, wait for the KCP; ``report`` the
    fault's numbers (the fault tests' report fixture). The seconds to converge."""
    last_write = w.stop()
    failed = w.failed()
    assert not failed, f"{len(failed)} customer writes failed, e.g. {failed[:3]}; {w.summary()}"
    w.check_runtime()
    since = max(healed, last_write)
    converged = s.wait_converged(since, timeout)
    report(
        fault=fault,
        writes=len(w.writes),
        failed=len(failed),
        retried=len(w.retried()),
        fault_seconds=round(healed - began, 1),
        after_fault_seconds=round(converged + since - healed, 1),
        converged_seconds=round(converged, 1),
        workload=w.summary(),
        **extra,
    )
    return converged


# -- compass -----------------------------------------------------------------------------


class CompassProcess:
    """``tether compass`` (python -m command.cli compass) as a subprocess."""

    def __init__(
        self, workdir: pathlib.Path, kubeconfig: pathlib.Path, env: dict[str, str]
    ) -> None:
        self.port = controlplane.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"compass-{self.port}.log"
        base = {
            k: v for k, v in os.environ.items() if not k.startswith("TETHER_") and k != "KUBECONFIG"
        }
        self.env = {
            **base,
            **localnet.ENV,
            "KUBECONFIG": str(kubeconfig),
            "TETHER_COMPASS_BIND": f"127.0.0.1:{self.port}",
            "TETHER_LOG_FORMAT": "text",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> CompassProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "command.cli", "compass"],
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=controlplane.die_with_parent(),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"compass exited with {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return self
            time.sleep(0.1)
        raise AssertionError(f"compass not healthy in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return tail(self.log_path, 5000)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        controlplane.stop_group(self.proc, timeout)
        return self.proc.returncode
