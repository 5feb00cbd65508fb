"""BuildInfo: whether a backend can run here, and why not."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BuildInfo:
    """What a backend found on this machine: toolkit versions, paths, device, and the reason
    it is unavailable (when it is)."""

    name: str
    available: bool
    location: str | None = None
    reason: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)
    install_hint: str | None = None

    def summary(self) -> str:
        if self.available:
            vs = ", ".join(f"{k} {v}" for k, v in self.versions.items())
            return f"{self.name}: available at {self.location}" + (f" ({vs})" if vs else "")
        hint = f"; {self.install_hint}" if self.install_hint else ""
        return f"{self.name}: unavailable: {self.reason}{hint}"
