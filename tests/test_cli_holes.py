"""Local holes of the command line: noise-key files others can read, broken pipes, eps out
of range, keygen's missing folder, a guessable --seed in MPC runs."""

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from secure_auc.cli import main
from secure_auc.dp.rng import read_noise_key_file
from secure_auc.validation import InputError

ROOT = Path(__file__).resolve().parents[1]
KEY = "0123456789abcdef0123456789abcdef"


def _one_line_error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("secure-auc: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_noise_key_file_others_can_read_is_refused(tmp_path, mode):
    path = tmp_path / "client0.key"
    path.write_text(KEY + "\n")
    path.chmod(mode)
    with pytest.raises(InputError, match=rf"client 0: noise key file {re.escape(str(path))} is readable by others "
                                         rf"\(mode 0{mode:o}\): chmod 600 it"):
        read_noise_key_file(str(tmp_path / "client{client}.key"), 0)
    path.chmod(0o600)
    assert read_noise_key_file(str(tmp_path / "client{client}.key"), 0) == int(KEY, 16)


def test_the_client_command_refuses_a_noise_key_file_others_can_read(tmp_path, capsys):
    from secure_auc.data import write_client_csv
    from secure_auc.mpc.comm.roster import generate_identity, write_identity

    keys = {name: write_identity(tmp_path / f"{name}.pem", generate_identity())
            for name in ("server", "helper1", "dealer", "client0")}
    roster = tmp_path / "roster.json"
    roster.write_text(json.dumps({"server": keys["server"], "helpers": [keys["helper1"]], "dealer": keys["dealer"],
                                  "clients": [keys["client0"]]}))
    data = tmp_path / "c0.csv"
    write_client_csv(data, np.array([0.1, 0.7, 0.4]), np.array([0, 1, 1]))
    key = tmp_path / "client0.key"
    key.write_text(KEY + "\n")
    key.chmod(0o644)
    err = _one_line_error(capsys, ["client", str(data), "--client", "0", "--clients", "1", "--roster", str(roster),
                                   "--identity", str(tmp_path / "client0.pem"), "--parties", "127.0.0.1:1",
                                   "127.0.0.1:2", "--noise-key-file", str(key), "--mechanism", "laplace",
                                   "--epsilon", "1"])
    assert "is readable by others (mode 0644): chmod 600 it" in err


def test_the_readme_recipe_makes_a_noise_key_only_its_owner_can_read(tmp_path):
    readme = (ROOT / "README.md").read_text()
    recipes = re.findall(r"`([^`]*secrets\.token_hex\(16\)[^`]*)`", readme)
    assert recipes, "the README's noise-key recipe"
    (tmp_path / "keys").mkdir(mode=0o700)
    for recipe in recipes:
        (tmp_path / "keys" / "client0.key").unlink(missing_ok=True)
        subprocess.run(["bash", "-c", f"umask 022; {recipe}"], cwd=tmp_path, check=True, timeout=60)
        path = tmp_path / "keys" / "client0.key"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) & 0o077 == 0
        assert 0 <= read_noise_key_file(str(tmp_path / "keys" / "client{client}.key"), 0) < 2**128
