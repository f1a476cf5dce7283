"""What a user hands in: a YAML file or an output folder that fails is one line naming the path
(and the YAML line and column), never a traceback unless asked for."""

import pytest

from fednorm.config import ConfigError
from fednorm.inputs import InputError, read_yaml, user_errors, writable_folder


def test_a_yaml_syntax_error_names_the_file_line_and_column(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("steps: 10\nlr: [0.1\nseed: 1\n")  # the list is never closed
    with pytest.raises(InputError) as err:
        read_yaml(path, "config file")
    message = str(err.value)
    assert message.startswith(f"config file {path}: not valid YAML: line 3, column 5: ")
    assert "from line 2, column 5" in message and "\n" not in message


def test_a_bad_encoding_and_a_tab_are_yaml_errors_too(tmp_path):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"note: caf\xe9\n")
    tab = tmp_path / "tab.yaml"
    tab.write_text("run:\n\tsteps: 1\n")
    for path in (latin, tab):
        with pytest.raises(InputError, match=f"^config file {path}: not valid YAML: "):
            read_yaml(path, "config file")


def test_a_missing_file_or_a_folder_says_so(tmp_path):
    with pytest.raises(InputError, match=r"nope\.yaml: no such file; pass the path of an"):
        read_yaml(tmp_path / "nope.yaml", "config file")
    with pytest.raises(InputError, match=f"^claims file {tmp_path}: is a folder, not a file"):
        read_yaml(tmp_path, "claims file")


def test_an_empty_file_is_none_and_a_mapping_is_read(tmp_path):
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "ok.yaml").write_text("run: {steps: 3}\n")
    assert read_yaml(tmp_path / "empty.yaml") is None
    assert read_yaml(tmp_path / "ok.yaml") == {"run": {"steps": 3}}


def test_a_folder_that_cannot_be_created_names_the_option(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match=r"^--out .*file/out: cannot create this folder: "):
        writable_folder(tmp_path / "file" / "out", "--out")
    with pytest.raises(InputError, match="file: cannot create this folder: a file is in the way"):
        writable_folder(tmp_path / "file", "--out")
    assert writable_folder(tmp_path / "a" / "b", "--out").is_dir()


@pytest.mark.parametrize(("error", "line", "code"), [
    (ConfigError("run: key 'steps' has value 0; allowed: an integer >= 1"),
     "fednorm: configuration error: run: key 'steps' has value 0; allowed: an integer >= 1", 2),
    (InputError("config file x.yaml: no such file"), "fednorm: config file x.yaml: no such file",
     2),
    (OSError(28, "No space left on device", "results/summary.csv"),
     "fednorm: results/summary.csv: No space left on device (--debug or FEDNORM_DEBUG=1 shows "
     "where)", 1),
])
def test_user_errors_print_one_line_and_exit(error, line, code, capsys, monkeypatch):
    monkeypatch.delenv("FEDNORM_DEBUG", raising=False)
    with pytest.raises(SystemExit) as done, user_errors():
        raise error
    assert done.value.code == code
    assert capsys.readouterr().err == line + "\n"


def test_debug_keeps_the_exception(monkeypatch):
    monkeypatch.delenv("FEDNORM_DEBUG", raising=False)
    with pytest.raises(ConfigError), user_errors(debug=True):
        raise ConfigError("x")
    with pytest.raises(ZeroDivisionError), user_errors():  # a bug, not the user's: kept
        raise ZeroDivisionError
    monkeypatch.setenv("FEDNORM_DEBUG", "1")
    with pytest.raises(InputError), user_errors():
        raise InputError("x")
