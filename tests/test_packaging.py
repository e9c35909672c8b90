"""`pip install .` (not editable) must ship the templates and the schemas."""
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_wheel_contains_templates_schemas_and_the_uws_command(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(tmp_path), str(REPO)], check=True, cwd=tmp_path)
    wheel, = tmp_path.glob("ivoa_uws_server-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "uws/schemas/UWS-v1.1.xsd" in names
    assert "uws/schemas/xlink.xsd" in names
    assert "uws/templates/base.html" in names
    assert {"uws/templates/uws.css", "uws/templates/uws.js", "uws/templates/job.html"} <= set(names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "uws = uws.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_schema_is_the_official_uws_1_1():
    from uws.resources import uws_schema_path
    text = uws_schema_path().read_text()
    assert 'version="1.1-REC-20161024"' in text
    assert 'schemaLocation="xlink.xsd"' in text
