"""What the SSH config says about a node reaches paramiko: HostName, Port, User, IdentityFile, ProxyCommand,
UserKnownHostsFile; install.* settings override it."""
from slurmkit import config
from slurmkit.install.ssh import ssh_options, short


def test_ssh_config_is_honoured_and_settings_override(tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("synthetic: only its existence matters here")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host gpu*\n  HostName %h.cluster.example\n  Port 2222\n  User admin\n  IdentityFile {key}\n"
                   f"  ProxyCommand ssh -W %h:%p bastion\n  UserKnownHostsFile {tmp_path}/kh\n")
    inst = config.loads(f"install:\n  ssh_config: {cfg}\n").install
    o = ssh_options("gpu007", inst)
    assert (o["hostname"], o["port"], o["user"]) == ("gpu007.cluster.example", 2222, "admin")
    assert o["key_filename"] == [str(key)]
    assert o["proxycommand"] == "ssh -W gpu007.cluster.example:2222 bastion"
    assert o["known_hosts"] == f"{tmp_path}/kh"
    inst = config.loads(f"install:\n  ssh_config: {cfg}\n  port: 22\n  user: root\n"
                        f"  known_hosts: {tmp_path}/mine\n").install
    o = ssh_options("gpu007", inst)
    assert (o["port"], o["user"], o["known_hosts"]) == (22, "root", f"{tmp_path}/mine")
    o = ssh_options("login1", inst)                     # no Host block matches: the name as given
    assert (o["hostname"], o["key_filename"], o["proxycommand"]) == ("login1", None, None)


def test_messages_quote_argv_and_cut_inline_scripts():
    assert short(["rm", "-f", "--", "/a b"]) == "rm -f -- '/a b'"
    assert short(["python3", "-c", "import os\nprint(1)", "x"]) == "python3 -c 'import os...' x"
