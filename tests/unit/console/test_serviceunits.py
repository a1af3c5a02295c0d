"""``pi-dispatch service``: what the units say, where they go, and what is refused (exit 2, one line)."""

from __future__ import annotations

import argparse
import os
import pwd
from pathlib import Path

import pytest

from pidispatch.common.cli import main
from pidispatch.common.errors import ConfigError
from pidispatch.console import serviceunits
from pidispatch.console.serviceunits import (
    TARGET,
    UnitPlan,
    compare,
    env_values,
    next_commands,
    render_units,
    stop_timeout,
    unit_dir,
)

ME = pwd.getpwuid(os.getuid()).pw_name


def plan(**changes: object) -> UnitPlan:
    base: dict[str, object] = {
        "folder": Path("/srv/pi dispatch"), "cli": "/opt/pd/.venv/bin/pi-dispatch", "user_mode": False,
        "run_as": "pd", "docker_group": True, "stop_timeout_s": 30,
        "services": ("receiver", "router", "worker"),
    }
    return UnitPlan(**{**base, **changes})  # type: ignore[arg-type]


def lines(text: str) -> set[str]:
    return set(text.splitlines())


def folder_with_env(tmp_path: Path, text: str = "WEBHOOK_SECRET=x\n") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / ".env").write_text(text)
    return tmp_path


def test_each_service_runs_this_installation_by_absolute_path_in_the_folder_with_its_env() -> None:
    units = render_units(plan())
    assert list(units) == ["pi-dispatch-receiver.service", "pi-dispatch-router.service",
                           "pi-dispatch-worker.service", TARGET]
    for service in ("receiver", "router", "worker"):
        unit = lines(units[f"pi-dispatch-{service}.service"])
        assert f'ExecStart="/opt/pd/.venv/bin/pi-dispatch" {service}' not in unit
        assert f"ExecStart=/opt/pd/.venv/bin/pi-dispatch {service}" in unit
        assert {"WorkingDirectory=/srv/pi dispatch", "EnvironmentFile=/srv/pi dispatch/.env", "User=pd",
                "Restart=on-failure", "RestartPreventExitStatus=2", "NoNewPrivileges=yes",
                f"PartOf={TARGET}", f"WantedBy={TARGET}"} <= unit


def test_only_the_worker_needs_docker_and_gets_a_stop_timeout_past_its_grace() -> None:
    units = render_units(plan())
    worker = lines(units["pi-dispatch-worker.service"])
    assert {"SupplementaryGroups=docker", "TimeoutStopSec=30"} <= worker
    assert any(line.startswith("After=") and "docker.service" in line for line in worker)
    router = units["pi-dispatch-router.service"]
    assert "docker" not in router and "TimeoutStopSec" not in router


def test_system_hardening_keeps_tmp_and_home_the_hosts_own_for_dockers_bind_mounts() -> None:
    worker = render_units(plan())["pi-dispatch-worker.service"]
    assert "ProtectSystem=full" in worker and "CapabilityBoundingSet=" in worker
    for breaking in ("PrivateTmp", "ProtectHome", "ProtectSystem=strict", "PrivateUsers", "DynamicUser"):
        assert breaking not in worker


def test_no_service_keeps_a_capability_but_a_worker_run_as_root_keeps_what_hands_over_folders() -> None:
    units = render_units(plan())
    assert all("CapabilityBoundingSet=\n" in units[f"pi-dispatch-{s}.service"]
               for s in ("receiver", "router", "worker"))
    as_root = render_units(plan(run_as="root"))
    assert "CapabilityBoundingSet=CAP_CHOWN CAP_FOWNER CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH\n" in as_root[
        "pi-dispatch-worker.service"]
    assert "CapabilityBoundingSet=\n" in as_root["pi-dispatch-router.service"]


def test_user_units_have_no_account_and_only_the_settings_a_user_manager_can_apply() -> None:
    units = render_units(plan(user_mode=True, run_as=None, docker_group=False))
    worker = units["pi-dispatch-worker.service"]
    assert "User=" not in worker and "SupplementaryGroups" not in worker
    assert "ProtectSystem" not in worker and "NoNewPrivileges=yes" in worker
    assert "WantedBy=default.target" in units[TARGET]
    assert next_commands(plan(user_mode=True)) == [
        "systemctl --user daemon-reload", f"systemctl --user enable --now {TARGET}"]


def test_the_target_wants_exactly_the_services_chosen() -> None:
    units = render_units(plan(services=("worker",)))
    assert list(units) == ["pi-dispatch-worker.service", TARGET]
    assert "Wants=pi-dispatch-worker.service\n" in units[TARGET]
    assert "WantedBy=multi-user.target" in units[TARGET]


def test_specifiers_and_dollars_in_paths_cannot_expand() -> None:
    unit = render_units(plan(folder=Path("/srv/100%"), cli="/opt/$x y/pi-dispatch"))
    text = unit["pi-dispatch-router.service"]
    assert "WorkingDirectory=/srv/100%%\n" in text
    assert 'ExecStart="/opt/$$x y/pi-dispatch" router\n' in text


def test_env_values_read_the_file_as_systemd_does() -> None:
    text = ("# c\n\nWEBHOOK_SECRET=abc\nPI_TRIGGERS_FILE='/srv/a b/triggers.json'\n; x=y\n"
            "PI_SHUTDOWN_GRACE=60\n")
    assert env_values(text) == {"WEBHOOK_SECRET": "abc", "PI_TRIGGERS_FILE": "/srv/a b/triggers.json",
                                "PI_SHUTDOWN_GRACE": "60"}
    assert stop_timeout({"PI_SHUTDOWN_GRACE": "60"}) == 80
    assert stop_timeout({}) == 30


def test_system_units_need_root_unless_user_or_a_folder_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    args = argparse.Namespace(unit_dir=None, user=False)
    with pytest.raises(ConfigError, match=r"writing /etc/systemd/system needs root; accepted: sudo "):
        unit_dir(args, {})
    user = unit_dir(argparse.Namespace(unit_dir=None, user=True), {"HOME": "/home/a"})
    assert user == Path("/home/a/.config/systemd/user")
    assert unit_dir(argparse.Namespace(unit_dir=None, user=True), {"XDG_CONFIG_HOME": "/c"}) == Path(
        "/c/systemd/user")


def test_a_folder_without_env_is_refused_naming_init(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["service", "render", str(tmp_path), "--run-as", ME]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ".env is not a file; accepted: a folder `pi-dispatch init` wrote" in err


def test_a_root_owned_folder_needs_run_as(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = folder_with_env(tmp_path)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: pwd.getpwnam("root"))
    with pytest.raises(ConfigError, match=r"belongs to root.*accepted: --run-as USER"):
        serviceunits._run_as(None, folder / ".env")
    assert serviceunits._run_as("root", folder / ".env") == "root"


def test_install_writes_every_unit_keeps_equal_ones_and_refuses_different_ones_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, units = folder_with_env(tmp_path / "deploy"), tmp_path / "units"
    argv = ["service", "install", str(folder), "--run-as", ME, "--unit-dir", str(units)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("wrote ") == 4
    assert "  systemctl daemon-reload\n" in out.replace("sudo ", "")
    assert f"systemctl enable --now {TARGET}" in out
    assert sorted(p.name for p in units.iterdir()) == sorted(
        [*(f"pi-dispatch-{s}.service" for s in ("receiver", "router", "worker")), TARGET])
    assert all(oct(p.stat().st_mode & 0o777) == "0o644" for p in units.iterdir())
    assert main(argv) == 0 and capsys.readouterr().out.count("kept ") == 4

    edited = units / "pi-dispatch-router.service"
    edited.write_text(edited.read_text() + "# mine\n")
    assert main(argv) == 2
    assert "pi-dispatch-router.service in " in capsys.readouterr().err
    assert edited.read_text().endswith("# mine\n")
    assert main([*argv, "--force"]) == 0
    assert "rewrote " in capsys.readouterr().out and not edited.read_text().endswith("# mine\n")


def test_compare_names_each_unit_state(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("same")
    (tmp_path / "b").write_text("old")
    assert compare({"a": "same", "b": "new", "c": "x"}, tmp_path) == {
        "a": "unchanged", "b": "differs", "c": "new"}


def test_a_metrics_port_in_env_is_named_since_router_and_worker_would_share_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = folder_with_env(tmp_path, "PD_METRICS_PORT=9100\n")
    assert main(["service", "render", str(folder), "--run-as", ME]) == 0
    assert "# note: PD_METRICS_PORT in .env: the router and the worker would both listen on it" in (
        capsys.readouterr().out)


def test_only_accepts_a_list_of_known_services(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["service", "render", str(tmp_path), "--only", "worker,web"])
    assert exit_.value.code == 2
    assert "accepted: a comma list of receiver, router, worker" in capsys.readouterr().err
