from __future__ import annotations

import re
from pathlib import Path

import pytest

from binrelay.config import (
    SCHEMA,
    Config,
    FromConfig,
    MetricsConfig,
    PurgeConfig,
    load_config,
    parse_config,
)
from binrelay.errors import ConfigError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
SECRET = "s3cr3t-Pa55"
MYSQL_GTID = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"

FULL_TOML = f"""\
relay-dir = "/var/lib/binrelay"
flavor = "mysql"
enable-gtid = true
relay-binlog-name = "mysql-bin.000003"
relay-binlog-gtid = "{MYSQL_GTID}"
server-id = 429
log-level = "debug"
relay-sync-interval = 0.5

[from]
host = "db1.example.com"
port = 3307
user = "relay"
password = "{SECRET}"

[purge]
interval = 60
expires = 24
remain-space = 100
"""


def parse(data: dict, env: dict | None = None) -> Config:
    # An empty env by default so that a BINRELAY_FROM_PASSWORD in the developer's shell
    # cannot change the outcome.
    return parse_config(data, "x.toml", env={} if env is None else env)


def error_of(data: dict, env: dict | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(data, env)
    return info.value


def with_dir(**top) -> dict:
    return {"relay-dir": "/r", **top}


def write(tmp_path: Path, text: str, name: str = "relay.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- valid files


def test_minimal_config_takes_every_default():
    config = parse({"relay-dir": "/r"})
    assert config == Config(
        relay_dir="/r",
        flavor=None,
        enable_gtid=False,
        relay_binlog_name="",
        relay_binlog_gtid="",
        server_id=0,
        log_level="info",
        relay_sync_interval=0.025,
        from_=FromConfig(host="127.0.0.1", port=3306, user="root", password=""),
        purge=PurgeConfig(interval=3600, expires=0, remain_space=15),
        source_path="x.toml",
    )


def test_schema_defaults_match_dataclass_defaults():
    config = parse({"relay-dir": "/r"})
    sections = {"": config, "from": config.from_, "purge": config.purge, "to": config.to,
                "sync": config.sync, "metrics": config.metrics}
    for section, keys in SCHEMA.items():
        for key, spec in keys.items():
            if spec.required:
                continue
            assert getattr(sections[section], key.replace("-", "_")) == spec.default, key
    assert PurgeConfig() == config.purge
    assert FromConfig() == config.from_


def test_empty_sections_take_defaults():
    config = parse({"relay-dir": "/r", "from": {}, "purge": {}})
    assert config.from_ == FromConfig()
    assert config.purge == PurgeConfig()


def test_full_config(tmp_path):
    path = write(tmp_path, FULL_TOML)
    config = load_config(path)
    assert config.relay_dir == "/var/lib/binrelay"
    assert config.flavor == "mysql"
    assert config.enable_gtid is True
    assert config.relay_binlog_name == "mysql-bin.000003"
    assert config.relay_binlog_gtid == MYSQL_GTID
    assert config.server_id == 429
    assert config.log_level == "debug"
    assert config.relay_sync_interval == 0.5
    assert config.from_ == FromConfig("db1.example.com", 3307, "relay", SECRET)
    assert config.purge == PurgeConfig(interval=60, expires=24, remain_space=100)
    assert config.source_path == str(path)


def test_config_is_frozen():
    config = parse({"relay-dir": "/r"})
    with pytest.raises(AttributeError):
        config.relay_dir = "/elsewhere"  # type: ignore[misc]


@pytest.mark.parametrize("value", [0, 1, 2.5])
def test_sync_interval_accepts_ints_and_floats(value):
    config = parse(with_dir(**{"relay-sync-interval": value}))
    assert config.relay_sync_interval == value
    assert isinstance(config.relay_sync_interval, float)


@pytest.mark.parametrize("key,value", [
    ("server-id", 1), ("server-id", 4294967295),
    ("log-level", "warn"), ("log-level", "error"),
    ("flavor", "mariadb"),
])
def test_boundary_and_choice_values(key, value):
    assert getattr(parse(with_dir(**{key: value})), key.replace("-", "_")) == value


@pytest.mark.parametrize("section,key,value", [
    ("from", "port", 1), ("from", "port", 65535),
    ("purge", "interval", 0), ("purge", "expires", 0), ("purge", "remain-space", 0),
])
def test_section_boundaries(section, key, value):
    config = parse({"relay-dir": "/r", section: {key: value}})
    assert getattr(getattr(config, "from_" if section == "from" else section),
                   key.replace("-", "_")) == value


@pytest.mark.parametrize("name", ["mysql-bin.000003", "mariadb-bin.1", "host.name-bin.999999"])
def test_binlog_names(name):
    assert parse(with_dir(**{"relay-binlog-name": name})).relay_binlog_name == name


@pytest.mark.parametrize("gtid", [
    MYSQL_GTID,
    "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5:7:9-12",
    f"{MYSQL_GTID},\n  4e11fa47-71ca-11e1-9e33-c80aa9429562:1",
    "3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_1:1-3",
    "0-1-100",
    "0-1-100,1-2-5",
])
def test_gtid_sets_that_pass_the_light_check(gtid):
    assert parse(with_dir(**{"relay-binlog-gtid": gtid})).relay_binlog_gtid == gtid


@pytest.mark.parametrize("flavor,gtid", [("mysql", MYSQL_GTID), ("mariadb", "0-1-100")])
def test_gtid_form_matching_flavor(flavor, gtid):
    config = parse(with_dir(flavor=flavor, **{"relay-binlog-gtid": gtid}))
    assert (config.flavor, config.relay_binlog_gtid) == (flavor, gtid)


# --------------------------------------------------------------------------- relay-dir


def test_relay_dir_expands_home(monkeypatch):
    monkeypatch.setenv("HOME", "/home/op")
    assert parse({"relay-dir": "~/relay"}).relay_dir == "/home/op/relay"


def test_relative_relay_dir_is_kept_as_written():
    assert parse({"relay-dir": "relay/../data"}).relay_dir == "relay/../data"


def test_relative_relay_dir_resolves_against_config_dir(tmp_path, monkeypatch):
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    path = write(conf_dir, 'relay-dir = "relay"\n')
    monkeypatch.chdir(tmp_path)
    config = load_config(Path("etc") / "relay.toml")
    monkeypatch.chdir("/")  # later calls must not depend on the directory at load time
    assert config.resolve_relay_dir() == path.parent / "relay"
    assert config.source_path == str(path)


def test_absolute_relay_dir_resolves_to_itself():
    config = parse_config({"relay-dir": "/var/relay"}, "/etc/binrelay/x.toml", env={})
    assert config.resolve_relay_dir() == Path("/var/relay")


def test_relative_relay_dir_with_parse_config_source():
    config = parse_config({"relay-dir": "relay"}, "/etc/binrelay/x.toml", env={})
    assert config.resolve_relay_dir() == Path("/etc/binrelay/relay")


# --------------------------------------------------------------------------- password


def test_password_from_env_when_key_absent():
    config = parse({"relay-dir": "/r"}, env={"BINRELAY_FROM_PASSWORD": SECRET})
    assert config.from_.password == SECRET


def test_password_key_wins_over_env():
    config = parse({"relay-dir": "/r", "from": {"password": "file"}},
                   env={"BINRELAY_FROM_PASSWORD": "env"})
    assert config.from_.password == "file"


def test_password_env_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv("BINRELAY_FROM_PASSWORD", SECRET)
    assert parse_config({"relay-dir": "/r"}, "x.toml").from_.password == SECRET
    monkeypatch.delenv("BINRELAY_FROM_PASSWORD")
    assert parse_config({"relay-dir": "/r"}, "x.toml").from_.password == ""


def test_password_not_in_repr(tmp_path):
    config = load_config(write(tmp_path, FULL_TOML))
    assert config.from_.password == SECRET
    for text in (repr(config), str(config), repr(config.from_), str(config.from_)):
        assert SECRET not in text
        assert "password=" not in text


@pytest.mark.parametrize("bad", [12345678, 1.5, True, ["x"]])
def test_password_of_wrong_type_is_not_echoed(bad):
    err = error_of({"relay-dir": "/r", "from": {"password": bad}})
    assert err.message.startswith("config x.toml: [from] password: expected a string, got ")
    assert str(bad) not in str(err)
    assert str(bad).lower() not in str(err)


def test_password_not_in_any_error_of_a_file_holding_one(tmp_path):
    # Each variant breaks a different key while the file still holds the password.
    broken = [
        FULL_TOML.replace("port = 3307", 'port = "x"'),
        FULL_TOML.replace("host =", "hots ="),
        FULL_TOML.replace("server-id = 429", "server-id = 0"),
        FULL_TOML.replace('flavor = "mysql"', 'flavor = "mariadb"'),
        FULL_TOML.replace("[purge]", "[purge"),
        FULL_TOML + f'password = "{SECRET}"\n',
    ]
    for text in broken:
        with pytest.raises(ConfigError) as info:
            load_config(write(tmp_path, text))
        assert SECRET not in str(info.value)
        assert SECRET not in repr(info.value)


# --------------------------------------------------------------------------- unknown names


def test_unknown_top_level_key_suggests_spelling():
    err = error_of({"relay_dir": "/r"})
    assert err.message == 'config x.toml: unknown key "relay_dir" (did you mean "relay-dir"?)'


def test_unknown_key_in_section_suggests_spelling():
    err = error_of({"relay-dir": "/r", "from": {"prot": 3306}})
    assert err.message == 'config x.toml: [from] unknown key "prot" (did you mean "port"?)'


def test_unknown_key_with_underscores_in_section():
    err = error_of({"relay-dir": "/r", "purge": {"remain_space": 1}})
    assert '"remain_space" (did you mean "remain-space"?)' in err.message


def test_top_level_key_under_a_section_header():
    err = error_of({"from": {"relay-dir": "/r"}})
    assert err.message == ('config x.toml: [from] unknown key "relay-dir" '
                           "(it is a top-level key: move it above the first [section])")


def test_section_key_at_top_level():
    err = error_of(with_dir(port=3306))
    assert err.message == 'config x.toml: unknown key "port" (it belongs in [from])'


def test_unknown_key_without_suggestion():
    err = error_of(with_dir(zzz=1))
    assert err.message == 'config x.toml: unknown key "zzz"'
    assert "configuration.md" in err.hint


def test_unknown_section_suggests_spelling():
    err = error_of(with_dir(form={"host": "h"}))
    assert err.message == "config x.toml: unknown section [form] (did you mean [from]?)"


def test_unknown_section_without_suggestion():
    err = error_of(with_dir(checker={"check-enable": True}))
    assert err.message == "config x.toml: unknown section [checker]"


def test_section_that_is_not_a_table():
    err = error_of(with_dir(purge=5))
    assert err.message == "config x.toml: [purge]: expected a table, got 5"


# --------------------------------------------------------------------------- wrong values


def test_missing_relay_dir():
    err = error_of({"from": {"host": "h"}})
    assert err.message == "config x.toml: relay-dir: required key is missing"
    assert "relay-dir" in err.hint


@pytest.mark.parametrize("data,message", [
    ({"relay-dir": 5}, 'relay-dir: expected a non-empty path string, got 5'),
    ({"relay-dir": ""}, 'relay-dir: expected a non-empty path string, got ""'),
    (with_dir(flavor="tidb"), 'flavor: expected one of "mariadb", "mysql", got "tidb"'),
    (with_dir(flavor=""), 'flavor: expected one of "mariadb", "mysql", got ""'),
    (with_dir(**{"enable-gtid": "true"}), 'enable-gtid: expected true or false, got "true"'),
    (with_dir(**{"enable-gtid": 1}), "enable-gtid: expected true or false, got 1"),
    (with_dir(**{"relay-binlog-name": 3}), "relay-binlog-name: expected a string, got 3"),
    (with_dir(**{"relay-binlog-gtid": []}), "relay-binlog-gtid: expected a string, got an array"),
    (with_dir(**{"server-id": "7"}),
     'server-id: expected an integer in 1..4294967295, got "7"'),
    (with_dir(**{"server-id": 7.0}), "server-id: expected an integer in 1..4294967295, got 7.0"),
    (with_dir(**{"log-level": "fatal"}),
     'log-level: expected one of "debug", "info", "warn", "error", got "fatal"'),
    (with_dir(**{"relay-sync-interval": "0.1"}),
     'relay-sync-interval: expected a number >= 0, got "0.1"'),
    (with_dir(**{"relay-sync-interval": {}}),
     "relay-sync-interval: expected a number >= 0, got a table"),
    (with_dir(**{"from": {"host": 1}}), "[from] host: expected a non-empty string, got 1"),
    (with_dir(**{"from": {"host": ""}}), '[from] host: expected a non-empty string, got ""'),
    (with_dir(**{"from": {"port": "abc"}}),
     '[from] port: expected an integer in 1..65535, got "abc"'),
    (with_dir(**{"from": {"user": 0}}), "[from] user: expected a string, got 0"),
    (with_dir(**{"purge": {"interval": 1.5}}),
     "[purge] interval: expected an integer >= 0, got 1.5"),
])
def test_wrong_types(data, message):
    assert error_of(data).message == "config x.toml: " + message


@pytest.mark.parametrize("data,message", [
    (with_dir(**{"server-id": True}), "server-id: expected an integer in 1..4294967295, got true"),
    (with_dir(**{"from": {"port": True}}),
     "[from] port: expected an integer in 1..65535, got true"),
    (with_dir(**{"purge": {"expires": False}}),
     "[purge] expires: expected an integer >= 0, got false"),
    (with_dir(**{"relay-sync-interval": False}),
     "relay-sync-interval: expected a number >= 0, got false"),
])
def test_bool_is_not_a_number(data, message):
    assert error_of(data).message == "config x.toml: " + message


@pytest.mark.parametrize("data,message", [
    (with_dir(**{"server-id": 0}), "server-id: expected an integer in 1..4294967295, got 0"),
    (with_dir(**{"server-id": 4294967296}),
     "server-id: expected an integer in 1..4294967295, got 4294967296"),
    (with_dir(**{"from": {"port": 0}}), "[from] port: expected an integer in 1..65535, got 0"),
    (with_dir(**{"from": {"port": 65536}}),
     "[from] port: expected an integer in 1..65535, got 65536"),
    (with_dir(**{"purge": {"interval": -1}}), "[purge] interval: expected an integer >= 0, got -1"),
    (with_dir(**{"purge": {"expires": -1}}), "[purge] expires: expected an integer >= 0, got -1"),
    (with_dir(**{"purge": {"remain-space": -5}}),
     "[purge] remain-space: expected an integer >= 0, got -5"),
    (with_dir(**{"relay-sync-interval": -0.5}),
     "relay-sync-interval: expected a number >= 0, got -0.5"),
    (with_dir(**{"relay-sync-interval": float("inf")}),
     "relay-sync-interval: expected a number >= 0, got inf"),
    (with_dir(**{"relay-sync-interval": float("nan")}),
     "relay-sync-interval: expected a number >= 0, got nan"),
])
def test_out_of_range(data, message):
    assert error_of(data).message == "config x.toml: " + message


def test_server_id_zero_hint():
    assert "leave server-id out" in error_of(with_dir(**{"server-id": 0})).hint


def test_quoted_number_hint():
    err = error_of(with_dir(**{"from": {"port": "3306"}}))
    assert "without quotes" in err.hint
    assert "without quotes" not in error_of(with_dir(**{"from": {"port": "abc"}})).hint


def test_upper_case_choice_hint():
    assert "lower case" in error_of(with_dir(flavor="MySQL")).hint


@pytest.mark.parametrize("name", [
    "mysql-bin", "mysql-bin.", "mysql-bin.00a", ".000003", "logs/mysql-bin.000003",
    "mysql bin.000003", "mysql-bin.000003 ",
])
def test_bad_binlog_name(name):
    err = error_of(with_dir(**{"relay-binlog-name": name}))
    assert err.message.startswith(
        'config x.toml: relay-binlog-name: expected a binlog file name like "mysql-bin.000003", '
        "got "
    )


@pytest.mark.parametrize("gtid", [
    "abc",
    "3e11fa47-71ca-11e1-9e33-c80aa9429562",           # no interval
    "3e11fa47-71ca-11e1-9e33-c80aa9429562:",
    "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-",
    "3e11fa47-71ca-11e1-9e33:1-5",                     # short uuid
    "zz11fa47-71ca-11e1-9e33-c80aa9429562:1-5",
    "0-1",
    "   ",                                              # blank is not "" (no set)
    "0-1-x",
    "0-1-100,",
    f"{MYSQL_GTID},0-1-100",                            # two flavors in one set
])
def test_bad_gtid_syntax(gtid):
    err = error_of(with_dir(**{"relay-binlog-gtid": gtid}))
    assert err.message.startswith("config x.toml: relay-binlog-gtid: expected a MySQL GTID set")


def test_gtid_syntax_is_the_relays_own() -> None:
    """The file is checked with binrelay.gtid's grammar, which is MySQL's: an empty element
    (a trailing comma) is skipped, as MySQL skips it."""
    config = parse_config(with_dir(**{"relay-binlog-gtid": f"{MYSQL_GTID},"}), "x.toml")
    assert config.relay_binlog_gtid == f"{MYSQL_GTID},"


@pytest.mark.parametrize("flavor,gtid", [("mysql", "0-1-100"), ("mariadb", MYSQL_GTID)])
def test_gtid_form_must_match_flavor(flavor, gtid):
    err = error_of(with_dir(flavor=flavor, **{"relay-binlog-gtid": gtid}))
    assert err.message.startswith("config x.toml: relay-binlog-gtid: expected a ")
    assert f'because flavor = "{flavor}"' in err.message


def test_first_error_wins_and_is_one_line():
    err = error_of({"relay_dir": "/r", "from": {"port": "x"}})
    assert "\n" not in str(err)
    assert str(err).startswith("[BR1001] config x.toml: ")
    assert err.exit_code == 2


def test_long_string_values_are_shortened():
    err = error_of(with_dir(flavor="m" * 500))
    assert len(err.message) < 200


# --------------------------------------------------------------------------- files


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.message == f"config {path}: cannot read: No such file or directory"


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path))
    assert info.value.message.startswith(f"config {tmp_path}: cannot read: ")


def test_malformed_toml(tmp_path):
    path = write(tmp_path, 'relay-dir = "/r"\n[from\nport = 1\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = info.value.message
    assert message.startswith(f"config {path}: not valid TOML: ")
    assert "line 2" in message
    assert "\n" not in str(info.value)


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('relay-dir = "/r\xe9"\n'.encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.message == (
        f"config {path}: not valid TOML: not UTF-8 (bad byte at offset 15)")


def test_schema_error_from_file_names_the_file(tmp_path):
    path = write(tmp_path, 'relay-dir = "/r"\n[from]\nport = "abc"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.message == (
        f'config {path}: [from] port: expected an integer in 1..65535, got "abc"')


# --------------------------------------------------------------------------- docs in sync


def documented_keys() -> dict[tuple[str, str], str]:
    """(section, key) -> default cell of each key row in docs/configuration.md."""
    rows: dict[tuple[str, str], str] = {}
    section: str | None = None
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            heading = re.fullmatch(r"## `\[([\w-]+)\]`", line)
            section = "" if line == "## Top level" else heading.group(1) if heading else None
            continue
        row = re.match(r"\| `([\w-]+)` \|", line)
        if section is not None and row:
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows[(section, row.group(1))] = cells[2].replace("`", "")
    return rows


def test_docs_list_exactly_the_schema_keys():
    in_schema = {(section, key) for section, keys in SCHEMA.items() for key in keys}
    assert set(documented_keys()) == in_schema


def test_docs_show_the_schema_defaults():
    docs = documented_keys()
    for section, keys in SCHEMA.items():
        for key, spec in keys.items():
            assert docs[(section, key)] == spec.default_text, (section, key)


def test_docs_mention_the_password_variable():
    assert "BINRELAY_FROM_PASSWORD" in DOCS.read_text(encoding="utf-8")


def test_every_schema_key_has_a_meaning():
    for keys in SCHEMA.values():
        for key, spec in keys.items():
            assert spec.doc.strip(), key


# --------------------------------------------------------------------------- [metrics], [sync]


@pytest.mark.parametrize("addr", ["127.0.0.1:0", "127.0.0.1:9150", "localhost:65535",
                                  "[::1]:9150", ""])
def test_metrics_addresses(addr):
    config = parse(with_dir(metrics={"relay-addr": addr, "sync-addr": addr}))
    assert config.metrics.relay_addr == addr and config.metrics.sync_addr == addr


def test_metrics_default_off():
    assert parse(with_dir()).metrics == MetricsConfig(relay_addr="", sync_addr="")


@pytest.mark.parametrize("key", ["relay-addr", "sync-addr"])
@pytest.mark.parametrize("addr", ["9150", "127.0.0.1", "127.0.0.1:99999", ":9150",
                                  "::1:9150", "http://127.0.0.1:9150"])
def test_bad_metrics_address_names_key_and_file(tmp_path, key, addr):
    path = write(tmp_path, f'relay-dir = "/r"\n[metrics]\n{key} = "{addr}"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.message.startswith(f"config {path}: [metrics] {key}: expected a ")
    assert "\n" not in str(info.value)


def test_metrics_address_must_be_a_string(tmp_path):
    path = write(tmp_path, 'relay-dir = "/r"\n[metrics]\nrelay-addr = 9150\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.message == (
        f'config {path}: [metrics] relay-addr: expected a "host:port" address like '
        '"127.0.0.1:9150", or "" for off, got 9150')


def test_unknown_metrics_key_names_file(tmp_path):
    path = write(tmp_path, 'relay-dir = "/r"\n[metrics]\nrelay_addr = "127.0.0.1:1"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.message == (
        f'config {path}: [metrics] unknown key "relay_addr" (did you mean "relay-addr"?)')


@pytest.mark.parametrize("master", ["local", "local[*]", "local[2]", "local[2,3]",
                                    "local-cluster[2,1,1024]", "spark://127.0.0.1:7077",
                                    "k8s://https://h:6443", "yarn"])
def test_spark_masters(master):
    assert parse(with_dir(sync={"master": master})).sync.master == master


@pytest.mark.parametrize("master", ["", "local[0]", "locale", "127.0.0.1:7077", "spark:/h"])
def test_bad_spark_master_names_key_and_file(tmp_path, master):
    path = write(tmp_path, f'relay-dir = "/r"\n[sync]\nmaster = "{master}"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.message.startswith(
        f'config {path}: [sync] master: expected a Spark master URL')


@pytest.mark.parametrize("section,key", [("to", "port"), ("sync", "tasks"),
                                         ("purge", "interval"), ("metrics", "sync-addr")])
def test_every_section_names_file_and_key(tmp_path, section, key):
    path = write(tmp_path, f'relay-dir = "/r"\n[{section}]\n{key} = true\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.message.startswith(f"config {path}: [{section}] {key}: expected ")
