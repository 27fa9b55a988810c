"""The coordinator's settings: where the workers are, how often to look, what the budget is.

Validated when built (``slonkd coordinator`` exits 2 on a bad one, before campaigning).
Read by every part of the coordinator: :mod:`.observing`, :mod:`.admitting`,
:mod:`.executing`, :mod:`.composing`, :mod:`.reconciling` and :mod:`.leading`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slonkd.adapters.bus.client import BusSettings
from slonkd.adapters.kube.lease import LeaseSettings
from slonkd.adapters.slurm.choice import SlurmBackendName
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.core.budget import BudgetPolicy
from slonkd.core.config_tree import build, setting
from slonkd.core.job_blame import BlamePolicy
from slonkd.core.kube_objects import WORKER_SELECTOR
from slonkd.core.modes import Mode, check_pool
from slonkd.core.plan import Policy
from slonkd.core.rollout import RolloutSettings
from slonkd.runtime.coordinating.api import ApiTls
from slonkd.runtime.coordinating.audit_log import KEEP as AUDIT_KEEP
from slonkd.runtime.coordinating.audit_log import MAX_BYTES as AUDIT_MAX_BYTES
from slonkd.runtime.coordinating.audit_log import check_rotation
from slonkd.runtime.coordinating.credentials import CredentialSettings
from slonkd.runtime.coordinating.topology_settings import TopologySettings

WIRING = setting(in_file=False)
"""A field the command builds from the environment (MQTT, TLS, SLURM): no key of the file."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NudgeClient:
    """The broker client slurmctld's trigger program publishes with (the leader makes it)."""

    username: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobBlameSettings:
    """Nodes blamed for failed jobs (:mod:`.job_outcomes`): how much evidence, how often read."""

    min_failures: int = 3
    """K: independent infrastructure failures a node needs (at least 2)."""
    window_failures: int = 200
    """M: only the jobs since the last M infrastructure failures count."""
    max_p_value: float = 1e-4
    """How improbable the node's failure rate must be under its peers' rate."""
    infrastructure_exit_codes: tuple[int, ...] = ()
    """Exit codes (1..255) of FAILED jobs that count against their nodes (NODE_FAIL and
    BOOT_FAIL always do)."""
    exit_code_min_users: int = 2
    """Those exit codes count against a node only once jobs of this many different users
    failed with them on it (1: no bound): a user who can pick nodes and exit with such a code
    could otherwise drain the nodes they pick."""
    poll_s: float = 30.0
    """Finished jobs are read this often: well below slurmctld's MinJobAge (300 s by default),
    which is how long it remembers a finished job."""
    max_jobs: int = 20_000
    """Most finished jobs kept in the window (the oldest are forgotten first)."""

    def __post_init__(self) -> None:
        self.policy()
        if any(isinstance(c, bool) or not 1 <= c <= 255 for c in self.infrastructure_exit_codes):
            raise ValueError("infrastructure_exit_codes must be exit codes from 1 to 255")
        if not self.poll_s >= 1:
            raise ValueError("poll_s must be at least 1 second")
        if self.max_jobs < self.window_failures:
            raise ValueError("max_jobs must be at least window_failures")

    def policy(self) -> BlamePolicy:
        """The triangulation's policy (checked at start too)."""
        return BlamePolicy(
            min_failures=self.min_failures,
            window_failures=self.window_failures,
            max_p_value=self.max_p_value,
            exit_code_min_users=self.exit_code_min_users,
        )

    @classmethod
    def from_mapping(cls, raw: Any) -> JobBlameSettings:
        """Settings from the config file's JSON object; ValueError naming the key otherwise."""
        return build(cls, raw, path="job_blame")


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorSettings:
    """Where the workers are, how often to look, and how much may be taken out at once."""

    namespace: str = field(metadata=setting(env="POD_NAMESPACE"))
    """Where the worker pods, the Lease and the state ConfigMap live (``POD_NAMESPACE``)."""
    pod_selector: str = WORKER_SELECTOR
    """Label selector of the worker pods (one SLURM node each, named as the pod)."""
    identity: str = field(metadata=setting(env="POD_NAME"))
    """This candidate's name in the Lease (``POD_NAME``, else the host name)."""
    kubeconfig: str | None = field(default=None, metadata=setting(env="KUBECONFIG"))
    """A kubeconfig path (``KUBECONFIG``); None: the pod's in-cluster ServiceAccount."""
    lease_name: str = "slonkd-coordinator"
    """The Lease the candidates campaign for (one leader writes)."""
    lease_duration_s: float = 15.0
    """A leader that stops renewing is replaced after this long."""
    renew_deadline_s: float = 10.0
    """A leader that could not renew for this long stops writing and steps down."""
    retry_period_s: float = 2.0
    """Candidates try the Lease this often; the leader renews this often."""
    slurm: SlurmSettings = field(default_factory=SlurmSettings, metadata=WIRING)
    """How slurmctld is reached (``SLURM_CONF``)."""
    slurm_backend: SlurmBackendName = field(
        default=SlurmBackendName.SCONTROL, metadata=setting(env="SLONKD_SLURM_BACKEND")
    )
    """How SLURM is reached: ``scontrol`` (its clients), ``pyslurm`` (pyslurm in a child
    process, the build at ``pyslurm_path``; the start fails with one line when it cannot
    serve) or ``auto`` (pyslurm where its major.minor is the running slurmctld's, else
    scontrol; ``SLONKD_SLURM_BACKEND``). Chosen once at start and logged with why
    (``slurm.backend_chosen``)."""
    pyslurm_path: str = field(default="", metadata=setting(env="SLONKD_PYSLURM_PATH"))
    """The site directory of a pyslurm build (``SLONKD_PYSLURM_PATH``); empty: this
    interpreter's path. pyslurm is an optional extra under GPL-2.0 (see the README)."""
    policy: Policy = field(default_factory=Policy)
    """The rules' tunables: graces, remediation, proof of health before return."""
    resync_s: float = 30.0
    """A full pass (full SLURM read) at least this often, even when nothing seems to change."""
    poll_s: float = 0.7
    """The reasons-only SLURM read runs this often; a change starts a pass (0: off)."""
    change_poll: bool = True
    """Ask libslurm "node table changed since?" every ``change_poll_s`` and read the table with
    scontrol only on a change (used when the installed libslurm loads and SLURM is reached
    without an argv prefix; else the scontrol poll every ``poll_s``, logged once). On by
    default: SLURM failure to cordon p99 220-280 ms against about 650 ms with the scontrol
    poll (22.05 and 24.11, 50 events), and at 5,000 nodes slurmctld spends 6 ms/s on this
    coordinator against 11 ms/s (each "no change" costs slurmctld about 1 ms at that size).
    On a small cluster its five asks a second cost 2.9 against 0.8 ms/s, both negligible;
    ``false`` keeps the scontrol poll alone."""
    change_poll_s: float = 0.2
    """The change poll's period (an RPC answered without packing the table)."""
    max_reads_per_s: float = 2.0
    """Most slurmctld reads per second of this coordinator, polls and full reads together."""
    state_poll_s: float = 2.0
    """The state ConfigMap is read this often between passes, so that an operator's pause or
    breaker reset is seen within seconds rather than at the next resync."""
    debounce_s: float = 0.05
    """A pass starts once no event arrived for this long ..."""
    max_batch_delay_s: float = 1.0
    """... or this long after the first event of a burst, whichever comes first."""
    max_out: int = 10
    """Most nodes of a pool out of service before automated causes stop (the budget)."""
    max_out_percent: float = 10.0
    """... or this percentage of the pool, whichever is lower (at least one node)."""
    mass_percent: float = 20.0
    """More new automated outages than this percentage of a pool at once: a mass event."""
    budget_block_label: str = ""
    """A K8s node label naming its topology block: the budget then holds per pool and block
    (e.g. an NVLink domain) instead of per pool; "" : per pool."""
    state_name: str = "slonkd-state"
    """The ConfigMap holding breaker, pause and remediation history."""
    audit_path: str = ""
    """JSON-lines audit log of every action ("" : the structured log only)."""
    audit_max_bytes: int = AUDIT_MAX_BYTES
    """The audit log is rotated at this size ..."""
    audit_keep: int = AUDIT_KEEP
    """... keeping this many old files (``<audit_path>.1`` is the newest)."""
    dry_run: bool = False
    """Decide and log the plans, write nothing: ``observe`` for every pool."""
    pool_modes: Mapping[str, Mode] = field(default_factory=dict)
    """Per pool: ``observe``, ``quarantine`` or ``full`` (absent: ``full``), see
    :mod:`slonkd.core.modes`; ``slonkd mode POOL MODE`` switches one at run time."""
    api_host: str = "0.0.0.0"  # noqa: S104 - a pod's API listens on the pod's address
    """The status API's address (every interface of the pod)."""
    api_port: int = 8081
    """The status API (``slonkd status``); 0: any free port."""
    api_tls: ApiTls | None = field(default=None, metadata=WIRING)
    """The API's certificate and key: it serves HTTPS only (None: plain HTTP)."""
    metrics_port: int = 0
    """``/metrics`` (with ``/healthz`` and ``/readyz``) on a port of its own, plain HTTP even
    with ``api_tls`` (metrics carry no secret: counts, states and node names), so a
    NetworkPolicy can admit Prometheus there and not to the API; 0: no such port (the chart
    sets 9400). The API port serves ``/metrics`` too either way."""

    def __post_init__(self) -> None:
        BudgetPolicy(  # refuse impossible budgets at start, not at the first pass
            max_out=self.max_out,
            max_out_percent=self.max_out_percent,
            mass_percent=self.mass_percent,
        )
        for pool in self.pool_modes:
            check_pool(pool)
        for name in ("namespace", "identity", "cluster", "lease_name", "state_name", "api_host"):
            if not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string")
        if self.max_reads_per_s <= 0:
            raise ValueError("max_reads_per_s must be positive")
        if not self.change_poll_s > 0:
            raise ValueError("change_poll_s must be positive")
        if not 0 <= self.api_port <= 65535:
            raise ValueError("api_port must be between 0 and 65535")
        if not 0 <= self.metrics_port <= 65535:
            raise ValueError("metrics_port must be between 0 (none) and 65535")
        if self.metrics_port and self.metrics_port == self.api_port:
            raise ValueError("metrics_port must differ from api_port (0: none of its own)")
        for name in ("resync_s", "state_poll_s", "retry_period_s", "renew_deadline_s"):
            if not getattr(self, name) > 0:  # 0: a loop that never sleeps
                raise ValueError(f"{name} must be a positive number of seconds")
        for name in ("poll_s", "debounce_s", "max_batch_delay_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be a number of seconds >= 0")
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "lease timings need retry_period_s < renew_deadline_s < lease_duration_s"
                f" (got {self.retry_period_s}, {self.renew_deadline_s}, {self.lease_duration_s})"
            )
        self.lease_settings()  # the elector's own rules (safety margin) at start, not at campaign
        if self.suspect_min_nodes < 1:
            raise ValueError("suspect_min_nodes must be at least 1")
        if not 0 < self.suspect_fraction <= 1:
            raise ValueError("suspect_fraction must be a fraction in (0, 1]")
        check_rotation(self.audit_max_bytes, self.audit_keep)
        if not (self.sdiag_s == 0 or self.sdiag_s >= 1) or not self.sdiag_timeout_s > 0:
            raise ValueError("sdiag_s must be 0 (off) or at least 1, sdiag_timeout_s positive")
        if not self.quarantine_alert_s > 0:
            raise ValueError("quarantine_alert_s must be positive")

    def lease_settings(self) -> LeaseSettings:
        """The elector's settings (built, and so checked, at start too)."""
        return LeaseSettings(
            name=self.lease_name,
            namespace=self.namespace,
            identity=self.identity,
            lease_duration_s=self.lease_duration_s,
            renew_deadline_s=self.renew_deadline_s,
            retry_period_s=self.retry_period_s,
        )

    cluster: str = field(default="lab", metadata=setting(old_env=("SLONKD_CLUSTER",)))
    """The cluster's name in logs, Events and metrics."""
    bus: BusSettings | None = field(default=None, metadata=WIRING)
    """MQTT, to read the agents' health verdicts; None: no health input."""
    suspect_min_nodes: int = 3
    """A health check failing on at least this many nodes at once ..."""
    suspect_fraction: float = 0.3
    """... and this fraction of the nodes (whichever is more) is suspected, not believed:
    nothing more is taken out for it (``slonkd.core.fleet_decide``)."""
    topology: TopologySettings | None = None
    """Render topology.conf from node labels and reconfigure slurmctld; None: off."""
    credentials: CredentialSettings | None = field(default=None, metadata=WIRING)
    """Serve ``POST /v1/credentials`` (agents' MQTT clients through dynsec); None: off."""
    rollout: RolloutSettings | None = field(default_factory=RolloutSettings)
    """Worker rollouts of OnDelete StatefulSets (:mod:`.rolling`); None: off."""
    fleet_metrics: bool = True
    """Export the fleet's families on /metrics while leading
    (slonkd/runtime/coordinating/fleet_metrics.py)."""
    sdiag_s: float = 60.0
    """slurmctld's statistics (``sdiag``) are read this often for the fleet metrics (0: never)."""
    sdiag_timeout_s: float = 10.0
    """... each read given up after this long (counted as a failure, never fatal)."""
    quarantine_alert_s: float = 86400.0
    """Hardware slonkd took out that waits for a person longer than this is too long: exported
    as ``slonkd_quarantine_limit_seconds``, which ``SlonkdHardwareQuarantinedTooLong`` compares
    with ``slonkd_quarantined_longest_seconds`` (:mod:`.returning`)."""
    trigger_program: str = ""
    """slurmctld's permanent node triggers run this program (``slonkd-nudge``'s path where
    slurmctld runs), installed and kept by the leader (:mod:`.triggering`); "": off, and the
    leader clears the triggers a coordinator installed before."""
    job_blame: JobBlameSettings | None = None
    """Drain nodes that keep failing multi-node jobs (``slonkd:job-failures``, see
    :mod:`.job_outcomes`); None: off."""
    nudge_client: NudgeClient | None = field(default=None, metadata=WIRING)
    """slurmctld's broker client, made in dynsec by the leader with the triggers (None: the
    operator provides one, or none)."""
