"""`hearth models updates` and `hearth models update`, against the local hub server."""

from __future__ import annotations

import json
from pathlib import Path

from app.library.updates import load_report
from tests.app.cli.test_cli_models_hub import one_line_error, run
from tests.app.library.test_updates import FILENAME, REPO, tiny_model
from tests.helpers.hubserver import HubServer


def test_updates_json_shape_and_update(hub: HubServer, hermetic_home: Path) -> None:
    old = tiny_model()
    repo = hub.add_repo(REPO, [old])
    assert run("models", "download", REPO, "--endpoint", hub.url)[0] == 0
    code, out, err = run("models", "updates", "--json", "--endpoint", hub.url)
    assert code == 0, err
    assert json.loads(out) == {"updates": [], "checked": 1, "errors": []}

    new = tiny_model()
    commit = repo.replace_upstream(new)
    code, out, err = run("models", "updates", "--json", "--endpoint", hub.url)
    assert code == 0, err
    assert json.loads(out) == {
        "updates": [
            {
                "name": "tiny-Q8_0",
                "repo": REPO,
                "file": FILENAME,
                "installed_sha256": old.sha256,
                "upstream_sha256": new.sha256,
                "upstream_commit": commit,
                "in_place": False,
            }
        ],
        "checked": 1,
        "errors": [],
    }
    saved = load_report(hermetic_home)
    assert saved is not None and [u.name for u in saved.updates] == ["tiny-Q8_0"]
    code, out, _ = run("models", "updates", "--endpoint", hub.url)
    assert code == 0 and out.startswith(f"tiny-Q8_0\t{REPO}@{commit[:12]}\t{FILENAME}\t{old.sha256[:12]} -> ")

    code, out, err = run("models", "update", "tiny-Q8_0", "--endpoint", hub.url)
    assert code == 0, err
    assert f"Updated tiny-Q8_0 to {REPO}@{commit[:12]} (sha256 {new.sha256})" in out
    assert "Updating tiny-Q8_0" in err
    saved = load_report(hermetic_home)
    assert saved is not None and saved.updates == ()
    code, out, _ = run("models", "update", "--all", "--endpoint", hub.url)
    assert code == 0 and out == "Every model from the Hub is up to date.\n"
    code, out, _ = run("models", "verify", "tiny-Q8_0")
    assert code == 0 and new.sha256 in out


def test_updates_exit_codes(hub: HubServer) -> None:
    hub.add_repo(REPO, [tiny_model()])
    code, out, _ = run("models", "updates", "--endpoint", hub.url)
    assert code == 0 and "nothing to check" in out
    assert run("models", "download", REPO, "--endpoint", hub.url)[0] == 0
    hub.repos[REPO].commit([tiny_model("renamed.gguf")])

    code, out, err = run("models", "updates", "--json", "--endpoint", hub.url)
    assert code == 3
    data = json.loads(out)
    assert data["updates"] == [] and data["checked"] == 1
    assert data["errors"][0]["name"] == "tiny-Q8_0" and "no longer on main" in data["errors"][0]["reason"]
    assert err.startswith("hearth: tiny-Q8_0 could not be checked")

    code, _, err = run("models", "update", "tiny-Q8_0", "--endpoint", hub.url)
    assert code == 3 and err.splitlines()[-1].startswith("hearth: tiny-Q8_0 cannot be updated: ")
    code, _, err = run("models", "update", "nope", "--endpoint", hub.url)
    assert "No installed model is named 'nope'" in one_line_error(code, err)

    url = hub.url
    hub.stop()
    code, _, err = run("models", "updates", "--endpoint", url)
    assert "Could not reach the Hub" in one_line_error(code, err)
