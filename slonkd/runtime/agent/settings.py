"""The agent's settings: who it is (downward API), how it reaches Kubernetes and SLURM.

The ``agent`` section of the one configuration root (:mod:`slonkd.runtime.config_root`),
built by :func:`~slonkd.core.config_tree.build`; the agent itself is
:mod:`slonkd.runtime.agent.sidecar`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slonkd.adapters.bus.bootstrap import BootstrapSettings
from slonkd.adapters.bus.client import BusSettings
from slonkd.adapters.health.settings import HealthSettings
from slonkd.adapters.slurm.choice import SlurmBackendName
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.core.config_tree import setting
from slonkd.core.health import Hysteresis
from slonkd.core.plan import Policy

METRICS_PORT = 9464
"""Port of /healthz, /readyz and /metrics (the chart's ``agent.metricsPort``)."""
_WIRING = setting(in_file=False)
"""A field the command builds from the environment (MQTT, SLURM, the pod's uid)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSettings:
    """Who the agent is (downward API) and how it reaches Kubernetes and SLURM."""

    pod_name: str = field(metadata=setting(env="POD_NAME"))
    """This agent's pod (``POD_NAME``): the only pod it watches."""
    namespace: str = field(metadata=setting(env="POD_NAMESPACE"))
    """The pod's namespace (``POD_NAMESPACE``)."""
    kube_node: str = field(metadata=setting(env="NODE_NAME"))
    """The K8s node the pod runs on (``NODE_NAME``)."""
    slurm_node: str = field(metadata=setting(old_env=("SLONKD_SLURM_NODE",)))
    """The SLURM node the pod is (default: the pod's name)."""
    pod_uid: str = field(default="", metadata=setting(env="POD_UID", in_file=False))
    """This agent's pod incarnation (``POD_UID``). A pod of the same name with another uid is
    its successor: this agent never acts for it (it sees its own pod as gone). Empty: any
    pod of that name is its own."""
    kubeconfig: str | None = field(default=None, metadata=setting(env="KUBECONFIG"))
    """A kubeconfig path; None means the pod's in-cluster ServiceAccount."""
    slurm: SlurmSettings = field(default_factory=SlurmSettings, metadata=_WIRING)
    """How slurmd's node is reached (``SLURM_CONF``)."""
    slurm_backend: SlurmBackendName = field(
        default=SlurmBackendName.SCONTROL, metadata=setting(env="SLONKD_SLURM_BACKEND")
    )
    """How the agent's drains and releases reach slurmctld (``SLONKD_SLURM_BACKEND``): as the
    coordinator's ``slurm_backend`` (``scontrol``, ``pyslurm`` or ``auto``), chosen at start."""
    pyslurm_path: str = field(default="", metadata=setting(env="SLONKD_PYSLURM_PATH"))
    """Where the agent finds pyslurm (``SLONKD_PYSLURM_PATH``; empty: on its own path)."""
    policy: Policy = field(
        default_factory=Policy,
        metadata=setting(only=frozenset({"failure_grace_s", "unready_grace_s"})),
    )
    """The graces of the rules the agent applies (the coordinator's policy has the rest)."""
    resync_s: float = field(default=30.0, metadata=setting(old_env=("SLONKD_RESYNC_S",)))
    """A reconcile at least this often, even without a change."""
    shutdown_deadline_s: float = 5.0
    """On SIGTERM, the tasks get this long to end before they are cancelled."""
    ready_file: str | None = field(default=None, metadata=setting(old_env=("SLONKD_READY_FILE",)))
    """Touched once the caches have synced and the first reconcile ran (readiness)."""
    cluster: str = field(default="lab", metadata=setting(old_env=("SLONKD_CLUSTER",)))
    """The cluster's name in logs and metrics."""
    bus: BusSettings | None = field(default=None, metadata=_WIRING)
    """MQTT broker and credentials; None: no status is published (health stays local)."""
    health: HealthSettings | None = None
    """Checks to run on schedules; None: no health checks."""
    hysteresis: Hysteresis = field(default_factory=Hysteresis)
    """How many failing runs of a check make a ``fail``, and how many passes clear it."""
    metrics_port: int = field(
        default=METRICS_PORT, metadata=setting(old_env=("SLONKD_METRICS_PORT",))
    )
    """Port of /healthz, /readyz and /metrics; 0: no HTTP server."""
    metrics_address: str = field(
        default="0.0.0.0",  # noqa: S104 - the kubelet and Prometheus reach it by pod IP
        metadata=setting(old_env=("SLONKD_METRICS_ADDRESS",)),
    )
    """Address to listen on (0.0.0.0: every interface of the pod)."""
    bootstrap: BootstrapSettings | None = field(default=None, metadata=_WIRING)
    """Fetch the MQTT credentials from the coordinator with the pod-bound token; None: static."""
    report_linger_s: float = 10.0
    """On shutdown, wait this long at most for a scrape of an unscraped signal-to-requeue."""
