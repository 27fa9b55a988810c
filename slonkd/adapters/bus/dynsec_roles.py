"""Who may do what on the bus: the names and dynsec roles of the clients slonkd makes.

An agent's username and client id follow from its node's name; every client slonkd makes
(an agent, a coordinator replica, slurmctld's ``slonkd-nudge``) gets a role of its own,
``slonk-<username>`` (:func:`own_role`), holding only the topics it needs. Pure data: the
dynsec admin (:mod:`.dynsec`) creates, replaces and deletes them; the credentials API
(:mod:`slonkd.runtime.coordinating.credentials`) and the trigger installer
(:mod:`slonkd.runtime.coordinating.triggering`) ask for them; topic names come from
:mod:`slonkd.core.messages`.
"""

from __future__ import annotations

from typing import Any

from slonkd.core.messages import Channel, check_name, node_topic


def agent_username(node: str) -> str:
    """The MQTT username of ``node``'s agent."""
    return f"agent-{check_name(node, 'node')}"


def own_role(username: str) -> str:
    """The name of the dynsec role that slonkd makes for the client ``username`` alone."""
    return f"slonk-{check_name(username, 'client')}"


def agent_client_id(node: str) -> str:
    """The MQTT client id of ``node``'s agent (bound to its username in dynsec)."""
    return f"slonkd-agent-{check_name(node, 'node')}"


def agent_role(cluster: str, node: str) -> dict[str, Any]:
    """The dynsec role of ``node``'s agent: its own topics and nothing else."""
    own = {
        ch: str(node_topic(cluster, node, ch))
        for ch in (Channel.STATUS, Channel.EVENTS, Channel.COMMANDS)
    }
    return {
        "rolename": own_role(agent_username(node)),
        "acls": [
            {"acltype": "publishClientSend", "topic": own[Channel.STATUS], "allow": True},
            {"acltype": "publishClientSend", "topic": own[Channel.EVENTS], "allow": True},
            {"acltype": "subscribeLiteral", "topic": own[Channel.COMMANDS], "allow": True},
            {"acltype": "publishClientReceive", "topic": own[Channel.COMMANDS], "allow": True},
            {
                "acltype": "subscribeLiteral",
                "topic": f"slonk/v1/{cluster}/coordinator/status",
                "allow": True,
            },
            {
                "acltype": "publishClientReceive",
                "topic": f"slonk/v1/{cluster}/coordinator/status",
                "allow": True,
            },
        ],
    }


def coordinator_role(cluster: str, username: str) -> dict[str, Any]:
    """The dynsec role of the coordinator: send every node's commands and its own status.

    It reads only what it subscribes to (every node's status, slurmctld's nudges): no ``#``,
    so the session of a gone coordinator queues no more than that.
    """
    root = f"slonk/v1/{check_name(cluster, 'cluster')}"
    reads = (f"{root}/nodes/+/status", f"{root}/slurm/events")
    return {
        "rolename": own_role(username),
        "acls": [
            {"acltype": "publishClientSend", "topic": f"{root}/nodes/+/commands", "allow": True},
            {"acltype": "publishClientSend", "topic": f"{root}/coordinator/status", "allow": True},
            *({"acltype": "subscribeLiteral", "topic": t, "allow": True} for t in reads),
            *({"acltype": "publishClientReceive", "topic": t, "allow": True} for t in reads),
        ],
    }


def nudge_role(cluster: str, username: str) -> dict[str, Any]:
    """The dynsec role of slurmctld's trigger program (slonkd-nudge): publish SLURM events only."""
    root = f"slonk/v1/{check_name(cluster, 'cluster')}"
    return {
        "rolename": own_role(username),
        "acls": [{"acltype": "publishClientSend", "topic": f"{root}/slurm/events", "allow": True}],
    }
