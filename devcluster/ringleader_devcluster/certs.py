"""Client certificates signed by the dev cluster's CA (made with openssl): how the real node's kubelet, kube-proxy
and CoreDNS authenticate to the API server as the users Kubernetes' RBAC defaults expect."""

from __future__ import annotations

from pathlib import Path

from .tools import run


def client_certificate(
    out: Path, name: str, common_name: str, organization: str | None, pki: Path
) -> tuple[Path, Path]:
    """`out/<name>.crt` and `.key` for user `common_name` (in group `organization`), valid for a year; made
    again on every call (a dev cluster's state is short-lived)."""
    out.mkdir(parents=True, exist_ok=True)
    key, csr, cert = out / f"{name}.key", out / f"{name}.csr", out / f"{name}.crt"
    subject = (f"/O={organization}" if organization else "") + f"/CN={common_name}"
    run(
        ["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
         "-subj", subject],
        f"openssl req ({name}'s key)",
    )  # fmt: skip
    run(
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
         "-CAcreateserial", "-days", "365", "-out", str(cert)],
        f"openssl x509 ({name}'s certificate)",
    )  # fmt: skip
    return cert, key
