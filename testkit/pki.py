"""Certificates for the test control planes and the fake API server: a CA per cluster, the serving and client
leaves its components need, the service-account signing key, and kubeconfigs that use them."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


_OPENSSL_CNF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
"""


@dataclass(frozen=True)
class Pki:
    """Paths of every key and certificate a cluster needs; leaf names map to ``<name>.crt``/``<name>.key``."""

    dir: Path

    def crt(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    @property
    def sa_public(self) -> Path:
        return self.dir / "sa.pub"


#: name -> (subject as (O, CN), profile). Client CNs are the identities RBAC's bootstrap policy knows.
_LEAVES = {
    "apiserver": ((None, "kube-apiserver"), "server"),
    "loopback-serving": ((None, "127.0.0.1"), "server"),
    "admin": (("system:masters", "nra-admin"), "client"),
    "scheduler": ((None, "system:kube-scheduler"), "client"),
    "controller-manager": ((None, "system:kube-controller-manager"), "client"),
}


def make_pki(directory: Path) -> Pki:
    """A fresh CA and leaves; openssl when present (the usual case), else the already-installed cryptography."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    if shutil.which("openssl"):
        _openssl_pki(pki)
    else:
        try:
            import cryptography  # noqa: F401
        except ImportError:
            # A failure, not a skip: a missing tool must never quietly turn the real-component tests off.
            raise RuntimeError("cluster tests need the openssl CLI (or the cryptography package) to make "
                               "certificates; .ci/run installs openssl") from None
        _cryptography_pki(pki)
    return pki


def openssl(*args: str | Path) -> None:
    proc = subprocess.run(["openssl", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(map(str, args))}: {proc.stdout}")


def _subject(org: str | None, cn: str) -> str:
    return (f"/O={org}" if org else "") + f"/CN={cn}"


def _openssl_pki(pki: Pki) -> None:
    cnf = pki.dir / "openssl.cnf"
    cnf.write_text(_OPENSSL_CNF)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", "-new", "-config", cnf, "-extensions", "ca", *ec, "-keyout", pki.key("ca"),
             "-out", pki.crt("ca"), "-days", "7", "-subj", "/CN=node-requests-agent-test-ca")
    for serial, (name, ((org, cn), profile)) in enumerate(_LEAVES.items(), start=2):
        csr = pki.dir / f"{name}.csr"
        openssl("req", "-new", "-config", cnf, *ec, "-keyout", pki.key(name), "-out", csr, "-subj", _subject(org, cn))
        openssl("x509", "-req", "-in", csr, "-CA", pki.crt("ca"), "-CAkey", pki.key("ca"), "-set_serial", serial,
                 "-days", "7", "-extfile", cnf, "-extensions", profile, "-out", pki.crt(name))
    # RS256 is what every service-account token consumer accepts.
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", pki.key("sa"))
    openssl("pkey", "-in", pki.key("sa"), "-pubout", "-out", pki.sa_public)


def _cryptography_pki(pki: Pki) -> None:
    """Same certificates as _openssl_pki, for machines without the openssl CLI."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def write_key(key, path: Path) -> None:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))

    def name(org: str | None, cn: str) -> x509.Name:
        attrs = ([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else [])
        return x509.Name(attrs + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def usage(ca: bool) -> x509.KeyUsage:
        return x509.KeyUsage(digital_signature=True, key_encipherment=not ca, content_commitment=False,
                             data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                             encipher_only=False, decipher_only=False)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name(None, "node-requests-agent-test-ca")
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
               .serial_number(1).not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=7))
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(usage(True), critical=True).sign(ca_key, hashes.SHA256()))
    write_key(ca_key, pki.key("ca"))
    pki.crt("ca").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
            *(x509.DNSName(d) for d in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                        "kubernetes.default.svc.cluster.local"))]
    for serial, (leaf, ((org, cn), profile)) in enumerate(_LEAVES.items(), start=2):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(org, cn)).issuer_name(ca_name)
                   .public_key(key.public_key()).serial_number(serial)
                   .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=7))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(usage(False), critical=True))
        if profile == "server":
            builder = (builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                       .add_extension(x509.SubjectAlternativeName(sans), critical=False))
        else:
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        write_key(key, pki.key(leaf))
        pki.crt(leaf).write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_key(sa, pki.key("sa"))
    pki.sa_public.write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))


def write_kubeconfig(path: Path, server: str, pki: Pki, user: str, token: str | None = None) -> Path:
    """A kubeconfig for one client identity (its certificate, or a bearer ``token``); JSON is valid YAML."""
    credentials = ({"token": token} if token is not None else
                   {"client-certificate": str(pki.crt(user)), "client-key": str(pki.key(user))})
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": user, "preferences": {},
        "clusters": [{"name": "nra", "cluster": {"server": server, "certificate-authority": str(pki.crt("ca"))}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "nra", "user": user}}],
    }
    path.write_text(json.dumps(config, indent=2))
    return path
