"""The ONLY place that imports huggingface_hub or does outbound HTTP (the Hub, its CDN, plain URLs).

Rooms: ``client`` (a Hub repo read through huggingface_hub, namespace and catalog listings), ``pulls``
(the one write: a pull request with one changed file, with the write token, and its status), ``net``
(the bounded ranged GET), ``sources`` (a local package folder and a plain URL with the same
interface), ``fetch`` (the GGUF header read loop and its thread pool, on any range reader),
``errors`` (our exception types; only expected Hub/network errors become them), ``records`` (plain
records and the source interfaces), ``ids`` (repo-id validation). It must never import Django models,
views or services (only ``client.default_endpoint`` reads ``django.conf.settings``, lazily), nor any
module of ``packages_app`` above it; callers pass a source object in rather than import the client.
"""

from packages_app.hub.client import (
    PUBLIC_ENDPOINT,
    HubConfig,
    HubSource,
    SkipFn,
    catalog_entry_rows,
    catalog_package_repos,
    catalog_package_rows,
    config_from_settings,
    default_endpoint,
    list_namespace_packages,
    model_card,
    namespace_packages,
)
from packages_app.hub.errors import (
    RETRY_STATUS,
    HubError,
    HubNotFound,
    HubRefused,
    HubUnauthorized,
    HubUnavailable,
    InvalidRepoId,
)
from packages_app.hub.fetch import FIRST_READ, HeaderFetcher, HeaderResult, read_header
from packages_app.hub.ids import validate_repo_id
from packages_app.hub.net import install_session, ranged_get
from packages_app.hub.pulls import PR_STATUSES, HubWriter, PullRequest
from packages_app.hub.records import (
    MANIFEST_MAX_BYTES,
    MANIFEST_PATH,
    SHA_RE,
    CommitInfo,
    CuratedCatalogRow,
    FetchStats,
    ModelCard,
    PackageSource,
    RangeReader,
    RemoteFile,
)
from packages_app.hub.sources import (
    LOCAL_REVISION,
    LocalFolderSource,
    UrlSource,
    parse_hf_uri,
    read_local_range,
)

install_session()  # huggingface_hub's own requests get the bounds too

__all__ = [
    "FIRST_READ",
    "LOCAL_REVISION",
    "MANIFEST_MAX_BYTES",
    "MANIFEST_PATH",
    "PR_STATUSES",
    "PUBLIC_ENDPOINT",
    "RETRY_STATUS",
    "SHA_RE",
    "CommitInfo",
    "CuratedCatalogRow",
    "FetchStats",
    "HeaderFetcher",
    "HeaderResult",
    "HubConfig",
    "HubError",
    "HubNotFound",
    "HubRefused",
    "HubSource",
    "HubUnauthorized",
    "HubUnavailable",
    "HubWriter",
    "InvalidRepoId",
    "LocalFolderSource",
    "ModelCard",
    "PackageSource",
    "PullRequest",
    "RangeReader",
    "RemoteFile",
    "SkipFn",
    "UrlSource",
    "catalog_entry_rows",
    "catalog_package_repos",
    "catalog_package_rows",
    "config_from_settings",
    "default_endpoint",
    "list_namespace_packages",
    "model_card",
    "namespace_packages",
    "parse_hf_uri",
    "ranged_get",
    "read_header",
    "read_local_range",
    "validate_repo_id",
]
