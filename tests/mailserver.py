"""A real mail system on loopback: Dovecot (IMAP + LMTP) and an SMTP hub (aiosmtpd).

The hub accepts mail (with SMTP AUTH checked against Dovecot's users), records every
message, and delivers it to Dovecot over LMTP. Recipes and pitfalls: shared/TESTBEDS.md.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import smtplib
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

USERS = {"opus@experience.local": "pw-opus", "mira@experience.local": "pw-mira",
         "aria@experience.local": "pw-aria", "operator@example.org": "pw-operator"}


def unavailable() -> str:
    if shutil.which("dovecot") is None:
        return "dovecot is missing (apt-get install dovecot-imapd dovecot-lmtpd)"
    if os.geteuid() != 0:
        return "the Dovecot fixture runs mail as nobody, which needs root"
    return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


CONF = """protocols = imap lmtp
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
base_dir = {d}/run
state_dir = {d}/state
log_path = {d}/dovecot.log
mail_location = maildir:~/Maildir
mailbox_idle_check_interval = 1 secs
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {d}/users
}}
userdb {{
  driver = static
  args = uid=nobody gid=nogroup home={d}/mail/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap}
  }}
  chroot =
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {lmtp}
  }}
}}
service anvil {{
  chroot =
}}
"""


@dataclass
class MailSystem:
    """Dovecot and the hub, with the ports a citizen's .env needs."""

    dir: Path
    imap_port: int = field(default_factory=free_port)
    lmtp_port: int = field(default_factory=free_port)
    smtp_port: int = field(default_factory=free_port)
    dovecot: subprocess.Popen[bytes] | None = None
    hub: Any = None
    received: list[bytes] = field(default_factory=list)

    def start(self) -> MailSystem:
        # Short, world-traversable path: Dovecot's processes run as other users, and
        # Unix socket paths must stay under 108 bytes.
        os.chmod(self.dir, 0o755)  # noqa: S103 - Dovecot's users must traverse it
        (self.dir / "mail").mkdir(exist_ok=True)
        shutil.chown(self.dir / "mail", "nobody", "nogroup")
        (self.dir / "users").write_text(
            "".join(f"{u}:{{PLAIN}}{p}\n" for u, p in USERS.items()))
        (self.dir / "dovecot.conf").write_text(
            CONF.format(d=self.dir, imap=self.imap_port, lmtp=self.lmtp_port))
        self.start_dovecot()
        self._start_hub()
        return self

    def start_dovecot(self) -> None:
        self.dovecot = subprocess.Popen(["dovecot", "-F", "-c", str(self.dir / "dovecot.conf")],
                                        start_new_session=True, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.imap_port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"dovecot did not start: {(self.dir / 'dovecot.log').read_text()}")

    def kill_dovecot(self) -> None:
        if self.dovecot is not None:
            os.killpg(self.dovecot.pid, signal.SIGKILL)
            self.dovecot.wait()
            # Its children (imap, imap-login) share the session; make sure none linger.
            subprocess.run(["pkill", "-9", "-s", str(self.dovecot.pid)], check=False)
            self.dovecot = None

    def freeze(self, frozen: bool) -> None:
        assert self.dovecot is not None
        subprocess.run(["pkill", "-STOP" if frozen else "-CONT", "-s", str(self.dovecot.pid)],
                       check=False)

    def _start_hub(self) -> None:
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult, LoginPassword

        system = self

        class Hub:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                system.received.append(envelope.content)
                # One LMTP transaction per recipient: LMTP answers DATA once per
                # recipient, and smtplib reads only one answer.
                for rcpt in envelope.rcpt_tos:
                    with smtplib.LMTP("127.0.0.1", system.lmtp_port) as lmtp:
                        lmtp.sendmail(envelope.mail_from, [rcpt], envelope.content)
                return "250 OK delivered"

        def authenticator(server: Any, session: Any, envelope: Any, mechanism: str,
                          auth_data: Any) -> AuthResult:
            ok = isinstance(auth_data, LoginPassword) and \
                USERS.get(auth_data.login.decode()) == auth_data.password.decode()
            return AuthResult(success=ok, handled=False)  # handled=False: else a bad pw hangs

        self.hub = Controller(Hub(), hostname="127.0.0.1", port=self.smtp_port,
                              authenticator=authenticator, auth_require_tls=False,
                              auth_required=False, data_size_limit=64 * 1024 * 1024)
        self.hub.start()

    def stop(self) -> None:
        if self.hub is not None:
            self.hub.stop()
        self.kill_dovecot()

    def env(self, user: str) -> str:
        """The .env lines of a citizen whose mailbox is `user`."""
        return (f"IMAP_SERVER=127.0.0.1:{self.imap_port}\nIMAP_TLS=plain\n"
                f"SMTP_SERVER=127.0.0.1:{self.smtp_port}\nSMTP_TLS=plain\n"
                f"EMAIL_USER={user}\nEMAIL_PASS={USERS[user]}\n")

    def send(self, msg: EmailMessage | bytes, sender: str, to: str | list[str]) -> None:
        """Deliver like an operator's mail client would (no AUTH); one copy per mailbox."""
        data = msg if isinstance(msg, bytes) else msg.as_bytes()
        data = re.sub(rb"(?<!\r)\n", b"\r\n", data)  # SMTP lines end in CRLF
        with smtplib.SMTP("127.0.0.1", self.smtp_port, timeout=60) as smtp:
            smtp.sendmail(sender, [to] if isinstance(to, str) else to, data)


def new_mail_system() -> MailSystem:
    return MailSystem(Path(tempfile.mkdtemp(prefix="mx-", dir="/tmp"))).start()
