"""Certificates signed by the dev cluster's CA (made with openssl): client certificates, how the real node's
kubelet, kube-proxy and CoreDNS authenticate to the API server as the users Kubernetes' RBAC defaults expect, and
serving certificates for loopback, how the API server trusts the webhooks of daemons that run beside it (Kueue)."""

from __future__ import annotations

from pathlib import Path

from .tools import run


def client_certificate(
    out: Path, name: str, common_name: str, organization: str | None, pki: Path, ip_san: str | None = None
) -> tuple[Path, Path]:
    """`out/<name>.crt` and `.key` for user `common_name` (in group `organization`), valid for a year; made
    again on every call (a dev cluster's state is short-lived). `ip_san`: also valid for serving at that IP
    address."""
    out.mkdir(parents=True, exist_ok=True)
    key, csr, cert = out / f"{name}.key", out / f"{name}.csr", out / f"{name}.crt"
    subject = (f"/O={organization}" if organization else "") + f"/CN={common_name}"
    run(
        ["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
         "-subj", subject],
        f"openssl req ({name}'s key)",
    )  # fmt: skip
    extensions: list[str] = []
    if ip_san:
        ext = out / f"{name}.ext"
        ext.write_text(f"subjectAltName=IP:{ip_san}\nextendedKeyUsage=serverAuth\n")
        extensions = ["-extfile", str(ext)]
    run(
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
         "-CAcreateserial", "-days", "365", "-out", str(cert), *extensions],
        f"openssl x509 ({name}'s certificate)",
    )  # fmt: skip
    return cert, key
