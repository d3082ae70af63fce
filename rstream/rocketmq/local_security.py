"""What ``LocalRocketMQ(acl=True, tls=True)`` adds to a local RocketMQ: users and ACLs, and TLS.

``acl``: RocketMQ 5.3's authentication and authorization (ACL 2.0) on the broker and the proxy
(``authenticationEnabled``, ``authorizationEnabled`` with RocketMQ's default providers, read in
5.3.3's ``AuthConfig`` and ``BrokerStartup``, which reads them from ``broker.conf``; the proxy from
``proxy.json``). Two users: ``admin``, a super user (``initAuthenticationUser``, also the broker's own
client, ``innerClientAuthenticationCredentials``), and ``rstream``, a normal user allowed what rstream
needs (``RSTREAM_NEEDS``), which ``LocalRocketMQ.broker()`` signs with. Their secrets are made once and
kept with the store (``store/rstream-users.json``), as RocketMQ keeps its users there
(``store/config/users``). The name server has no authentication in 5.3.3.

``tls``: every RocketMQ port speaks TLS only (``tls.server.mode=enforcing``, read in 5.3.3's
``TlsSystemConfig`` and ``NettyRemotingServer.TlsModeHandler``, which closes a plain connection; the
proxy's gRPC port by ``proxy.json``'s ``tlsCertPath``), with a certificate for the host signed by a
CA made for this home (``conf/tls/ca.pem``, ``LocalRocketMQ.tls_ca``) with the ``openssl`` program.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rstream.rocketmq.errors import RocketMQError
from rstream.rocketmq.remoting import Client, Credentials, RemotingError

#: The user LocalRocketMQ's ``broker()`` signs with, and what it is allowed: what rstream needs
#: (README, "On a real Apache RocketMQ"): on topics, create and delete them, send, pull, read their
#: offsets and configs, list them; on consumer groups, pull as one (``rstream-reader``), create
#: one, read and commit its offsets.
RSTREAM_USER = "rstream"
RSTREAM_NEEDS: dict[str, list[str]] = {
    "Topic:*": ["Create", "Delete", "Pub", "Sub", "Get", "List"],
    "Group:*": ["Create", "Sub", "Get", "Update"],
}
ADMIN_USER = "admin"

_AUTH = "org.apache.rocketmq.auth.authentication.provider"
_AUTHZ = "org.apache.rocketmq.auth.authorization.provider"
_PROXY_AUTH = "org.apache.rocketmq.proxy.auth"


class LocalSecurity:
    """The settings, files and users of a LocalRocketMQ with ``acl`` and/or ``tls`` (in ``home``)."""

    def __init__(self, home: Path, host: str, acl: bool, tls: bool) -> None:
        self.home, self.host, self.acl, self.tls = home, host, acl, tls
        self._secrets: dict[str, str] = {}

    # -- before the JVMs start ----------------------------------------------------------------
    def prepare(self, store: Path) -> None:
        """Make (or read back) the users' secrets and the TLS certificates."""
        if self.acl:
            kept = store / "rstream-users.json"
            if kept.is_file():
                self._secrets = json.loads(kept.read_text())
            else:
                self._secrets = {ADMIN_USER: secrets.token_urlsafe(18), RSTREAM_USER: secrets.token_urlsafe(18)}
                kept.touch(mode=0o600)
                kept.write_text(json.dumps(self._secrets))
        if self.tls:
            self._certificates()

    def broker_conf(self) -> list[str]:
        """``broker.conf`` lines."""
        if not self.acl:
            return []
        admin = self.admin_credentials
        return [
            "authenticationEnabled=true", f"authenticationProvider={_AUTH}.DefaultAuthenticationProvider",
            f"authenticationMetadataProvider={_AUTH}.LocalAuthenticationMetadataProvider",
            "authorizationEnabled=true", f"authorizationProvider={_AUTHZ}.DefaultAuthorizationProvider",
            f"authorizationMetadataProvider={_AUTHZ}.LocalAuthorizationMetadataProvider",
            "initAuthenticationUser=" + json.dumps({"username": admin.access_key, "password": admin.secret_key}),
            "innerClientAuthenticationCredentials=" + json.dumps({"accessKey": admin.access_key,
                                                                  "secretKey": admin.secret_key}),
        ]

    def proxy_conf(self) -> dict[str, Any]:
        """``proxy.json`` entries (its gRPC port, where the official client connects)."""
        conf: dict[str, Any] = {}
        if self.acl:
            conf.update({
                "authenticationEnabled": True, "authenticationProvider": f"{_AUTH}.DefaultAuthenticationProvider",
                "authenticationMetadataProvider": f"{_PROXY_AUTH}.ProxyAuthenticationMetadataProvider",
                "authorizationEnabled": True, "authorizationProvider": f"{_AUTHZ}.DefaultAuthorizationProvider",
                "authorizationMetadataProvider": f"{_PROXY_AUTH}.ProxyAuthorizationMetadataProvider",
            })
        if self.tls:
            conf.update({"tlsTestModeEnable": False, "tlsCertPath": str(self._tls_dir / "server.pem"),
                         "tlsKeyPath": str(self._tls_dir / "server.key")})
        return conf

    def java_options(self) -> list[str]:
        """System properties of both JVMs (``TlsSystemConfig``: the mode is read from them only)."""
        if not self.tls:
            return []
        return ["-Dtls.server.mode=enforcing", "-Dtls.enable=true", "-Dtls.test.mode.enable=false",
                f"-Dtls.config.file={self._tls_dir / 'tls.properties'}"]

    # -- what clients use ---------------------------------------------------------------------
    @property
    def credentials(self) -> Credentials | None:
        """The ``rstream`` user's (None without ``acl``)."""
        return Credentials(RSTREAM_USER, self._secret(RSTREAM_USER)) if self.acl else None

    @property
    def admin_credentials(self) -> Credentials:
        if not self.acl:
            raise RocketMQError("this LocalRocketMQ has no users: start LocalRocketMQ(acl=True) for them")
        return Credentials(ADMIN_USER, self._secret(ADMIN_USER))

    def _secret(self, user: str) -> str:
        if user not in self._secrets:
            raise RocketMQError("LocalRocketMQ's users are made at its start: call start() first")
        return self._secrets[user]

    @property
    def ca(self) -> str | None:
        """The CA file a client checks the servers' certificates against (None without ``tls``)."""
        return str(self._tls_dir / "ca.pem") if self.tls else None

    # -- after the broker started -------------------------------------------------------------
    def create_users(self, brokers: Sequence[str], timeout: float) -> None:
        """The ``rstream`` user and its ACL (``RSTREAM_NEEDS``) on each of ``brokers`` (addresses)."""
        if self.acl:
            try:
                self.add_user(brokers, RSTREAM_USER, self._secret(RSTREAM_USER), RSTREAM_NEEDS, timeout)
            except RemotingError as exc:
                raise RocketMQError(f"LocalRocketMQ(acl=True) could not make its user {RSTREAM_USER!r}: {exc}") from None

    def add_user(self, brokers: Sequence[str], username: str, secret_key: str, allow: Mapping[str, Sequence[str]],
                 timeout: float = 10.0) -> Credentials:
        """A normal user with secret ``secret_key``, allowed ``allow`` (resource -> actions,
        ``Client.create_acl``, which adds to the policies of a user that has some), on each of
        ``brokers``: each broker keeps its own users and ACLs."""
        client = Client("unused:0", timeout, credentials=self.admin_credentials, tls=self.ca)
        try:
            for broker in brokers:
                client.create_user(broker, username, secret_key)
                if allow:
                    client.create_acl(broker, username, allow)
        finally:
            client.close()
        return Credentials(username, secret_key)

    # -- certificates -------------------------------------------------------------------------
    @property
    def _tls_dir(self) -> Path:
        return self.home / "conf" / "tls"

    def _certificates(self) -> None:
        """A CA and a certificate for ``host`` signed by it, unless ``conf/tls`` has them for this host."""
        folder = self._tls_dir
        marker = folder / "host"
        if marker.is_file() and marker.read_text() == self.host and (folder / "server.key").is_file():
            return
        openssl = shutil.which("openssl")
        if openssl is None:
            raise RocketMQError("LocalRocketMQ(tls=True) makes its certificates with the openssl program, which is "
                                "not installed: `sudo apt-get install openssl`, then start again")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "ca.cnf").write_text(
            "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = rstream LocalRocketMQ CA\n"
            "[v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n"
            "subjectKeyIdentifier = hash\n")
        (folder / "server.ext").write_text(
            "basicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage = serverAuth\nsubjectAltName = IP:{self.host}\nsubjectKeyIdentifier = hash\n"
            "authorityKeyIdentifier = keyid\n")
        key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]  # PKCS#8, as Netty reads keys
        for command in (
                [openssl, "req", "-x509", "-new", "-config", "ca.cnf", "-extensions", "v3_ca", *key,
                 "-keyout", "ca.key", "-out", "ca.pem", "-days", "3650"],
                [openssl, "req", "-new", *key, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={self.host}"],
                [openssl, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-set_serial", f"0x{secrets.token_hex(8)}", "-days", "3650", "-out", "server.pem",
                 "-extfile", "server.ext"]):
            done = subprocess.run(command, cwd=folder, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=60)
            if done.returncode != 0:
                raise RocketMQError(f"openssl could not make LocalRocketMQ's TLS certificates in {folder}:\n"
                                    f"    {' '.join(command)}\n{done.stderr[-2000:]}")
        for name in ("ca.key", "server.key"):
            os.chmod(folder / name, 0o600)
        (folder / "tls.properties").write_text(  # read by TlsHelper over the system properties it knows
            "tls.test.mode.enable=false\ntls.server.need.client.auth=none\ntls.server.authClient=false\n"
            f"tls.server.certPath={folder / 'server.pem'}\ntls.server.keyPath={folder / 'server.key'}\n"
            "tls.client.authServer=false\n")
        marker.write_text(self.host)
