"""How the operator connects to the API server: its own client (kubernetes_asyncio: in-cluster credentials or the
kubeconfig, a bounded connection pool, no per-request look at the environment) and kopf's session (the same
bounds, the same client budget)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import aiohttp
import kopf
from kubernetes_asyncio import client, config

from .ratelimit import ClientBudget

# Open connections to the API server, for all jobs together. Each TLS connection costs ~250 KB of buffers in
# this process; the client's default (100) was reached by a burst of job creations for no gain in throughput.
API_CONNECTIONS = 32
KOPF_REQUESTS = 32  # kopf's own concurrent requests (patches, events) beside its long-lived watches


async def load_config(watches: int = 0) -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig ($KUBECONFIG or ~/.kube/config); its
    connection pool has room for `watches` long watch streams beside API_CONNECTIONS requests."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        await config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = API_CONNECTIONS + watches
    api = client.ApiClient(configuration)
    if not environment_proxies(os.environ):
        await ignore_environment(api)
    return api


# What makes aiohttp's trust_env do anything: a proxy for the API server's scheme, or a netrc file named.
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NETRC")


def environment_proxies(env: Mapping[str, str]) -> bool:
    """Whether the environment names a proxy (or a netrc file) the API client should honour."""
    return any(env.get(v) for v in PROXY_VARIABLES)


async def ignore_environment(api: client.ApiClient) -> None:
    """Give `api` an HTTP session that does not consult the environment for each request, on the same
    connection pool. kubernetes_asyncio's session always trusts it, and aiohttp then reads ~/.netrc and the
    proxy variables in a worker thread before every request: with none set, about a tenth of the operator's
    CPU while a burst of jobs started went to those threads and their hand-offs (py-spy)."""
    rest = api.rest_client
    old: aiohttp.ClientSession = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(connector=old.connector, trust_env=False, read_bufsize=2**21)
    old.detach()  # the connection pool now belongs to the new session
    await old.close()


def kopf_session(info: kopf.ConnectionInfo, watches: int, budget: ClientBudget) -> kopf.AiohttpSession:
    """kopf's HTTP session for `info`, as kopf would make it but with at most `watches` + KOPF_REQUESTS open
    connections, and every request taking its token from `budget` (the one the operator's own calls use).
    kopf's own has no limit: a burst of new jobs opened one TLS connection per concurrent patch (hundreds),
    each holding its buffers. `watches` must cover every watch stream kopf keeps open, or its requests would
    wait for a connection that a watch never gives back."""
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=watches + KOPF_REQUESTS, ssl=info.as_ssl_context()),
        trace_configs=[budget.trace_config()],
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
    return kopf.AiohttpSession(
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
        aiohttp_session=session,
    )
