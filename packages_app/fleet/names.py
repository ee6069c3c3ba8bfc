"""How a fleet row names its revision: owner, name, short sha, status, and whether it is broken."""

from __future__ import annotations

from packages_app.verdicts import Status, status_of


class RevisionNames:
    """Display helpers for a row naming a revision by ``repo_id`` and ``commit_sha``."""

    repo_id: str
    commit_sha: str
    verdict: str
    headline: str
    alert: bool

    @property
    def short_sha(self) -> str:
        return self.commit_sha[:8]

    @property
    def owner(self) -> str:
        return self.repo_id.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.repo_id.split("/", 1)[-1]

    @property
    def status(self) -> Status:
        return status_of(self.headline)

    @property
    def broken(self) -> bool:
        """The revision's headline calls for action, or nodes report its MTP weights unused."""
        return self.alert or self.status.needs_action
