"""course_tools/site.py's parts, without Sphinx, npm or a browser: widgets as static
snapshots, Mermaid blocks, the pages' own links and tables, the execution cache, the check
for files loaded from the internet, and what stops a build before any work. (The built site,
read in Chromium, is tests/site/test_site.py.)"""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path

import nbformat
import pytest
from scripts import ROOT

from course_tools import links as L
from course_tools import site as S

URL = "https://github.com/example-school/attention-course"
LINKS = L.Links(URL, "spring")


def test_mermaid_fences_become_blocks_mermaid_draws():
    md = "Text\n\n```mermaid\nflowchart LR\n  A[X] -->|W_Q| B[Q < K]\n```\n\nMore"
    out = S.mermaid_blocks(md)
    assert '<pre class="mermaid">' in out and "```" not in out
    assert "B[Q &lt; K]" in out and "--&gt;" in out  # escaped: mermaid reads textContent


def test_other_fences_are_left_alone():
    md = "```python\nx = 1\n```\n"
    assert S.mermaid_blocks(md) == md


def test_widget_state_becomes_a_static_snapshot():
    import ipywidgets as w
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import ipywidgets as w\n"
                "s = w.IntSlider(value=4, min=0, max=10, description='d_k')\n"
                "d = w.Dropdown(options=['dog', 'it'], value='it', description='query')\n"
                "w.VBox([w.HBox([s, d]), w.HTML('<b>attends to dog</b>'), w.Label('done')])"
            )
        ]
    )
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    assert w.__version__
    NotebookClient(nb, timeout=120, kernel_name="python3", store_widget_state=True).execute()
    assert S.snapshot_widgets(nb) == 1
    html = nb.cells[0].outputs[0]["data"]["text/html"]
    assert "<b>attends to dog</b>" in html and "done" in html
    assert 'type="range"' in html and "<code>4</code>" in html
    assert "<option>it</option>" in html
    assert "widgets" not in nb.metadata and S.WIDGET_VIEW not in nb.cells[0].outputs[0]["data"]


# --------------------------------------------------------------------------- widgets, by hand


def _model(name: str, **state) -> dict:
    return {"model_name": name, "state": state}


PNG = b"\x89PNG fake bytes"
STATE = {
    "box": _model("VBoxModel", children=["IPY_MODEL_tabs", "IPY_MODEL_row"], _dom_classes=["k"]),
    "row": _model("HBoxModel", children=["IPY_MODEL_f", "IPY_MODEL_r", "IPY_MODEL_c"]),
    "tabs": _model("TabModel", children=["IPY_MODEL_t", "IPY_MODEL_b"], titles=["First", None]),
    "f": _model("FloatSliderModel", value=0.123456, min=0, max=1, description="<scale>"),
    "r": _model("IntRangeSliderModel", value=[2, 5], min=0, max=9),
    "c": _model("CheckboxModel", value=True, description="causal"),
    "t": _model("TextModel", value="<hi>", description="name"),
    "b": _model("ButtonModel", description="Run"),
    "img": {
        "model_name": "ImageModel",
        "state": {"format": "png", "width": "300"},
        "buffers": [
            {"path": ["value"], "encoding": "base64", "data": base64.b64encode(PNG).decode()}
        ],
    },
    "out": _model("OutputModel", outputs=[{"output_type": "stream", "text": ["a < b"]}]),
    "odd": _model("SomethingNewModel", value=1),
}


def test_every_kind_of_control_is_drawn_as_it_was():
    html = S.Snapshot(STATE).render("box")
    assert html.startswith('<div class="snap-box k" style="display:flex;flex-direction:column')
    assert "flex-direction:row" in html  # the HBox
    assert "<div class='snap-title'>First</div>" in html and html.count("snap-title") == 1
    assert '<span class="snap-label">&lt;scale&gt;</span>' in html and "<code>0.123</code>" in html
    assert 'value="2"' in html and "<code>2–5</code>" in html  # a range slider
    assert "☑ causal" in html and "<button" in html and "disabled>Run</button>" in html
    assert "<code>&lt;hi&gt;</code>" in html


def test_images_outputs_and_unknown_models():
    snap = S.Snapshot(STATE)
    img = snap.render("img")
    assert f'src="data:image/png;base64,{base64.b64encode(PNG).decode()}"' in img
    assert 'width="300"' in img and 'alt="plot"' in img
    assert snap.render("out") == "<pre>a &lt; b</pre>"
    assert snap.render("odd") == "" and snap.render("missing") == ""
    loop = S.Snapshot({"a": _model("VBoxModel", children=["IPY_MODEL_a"])})
    assert loop.render("a").count("snap-box") == 31  # a cycle stops at depth 30


def test_captured_outputs_become_html():
    assert S.render_output({"data": {"image/png": "AAA"}}) == (
        '<img class="snap-image" src="data:image/png;base64,AAA">'
    )
    assert S.render_output({"data": {"image/svg+xml": ["<svg>", "</svg>"]}}) == "<svg></svg>"
    assert S.render_output({"data": {"text/html": "<b>x</b>"}}) == "<b>x</b>"
    assert S.render_output({"data": {"text/plain": "1 < 2"}}) == "<pre>1 &lt; 2</pre>"
    assert S.render_output({}) == ""
    assert S.ref_id("IPY_MODEL_abc") == "abc" and S.ref_id(None) == ""


def test_snapshot_widgets_replaces_views_and_drops_the_state():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {S.WIDGET_STATE: {"state": STATE}}
    views = [{"model_id": "c"}, {"model_id": "odd"}]
    nb.cells = [
        nbformat.v4.new_code_cell(
            "w",
            outputs=[
                nbformat.v4.new_output("display_data", data={S.WIDGET_VIEW: v, "text/plain": "W"})
            ],
        )
        for v in views
    ]
    assert S.snapshot_widgets(nb) == 1
    drawn, unknown = (c.outputs[0]["data"] for c in nb.cells)
    assert drawn["text/html"].startswith('<div class="course-widget-snapshot">')
    assert S.SNAPSHOT_NOTE in drawn["text/html"] and "☑ causal" in drawn["text/html"]
    assert unknown == {"text/plain": "W"}  # nothing to draw: the view goes, the text stays
    assert "widgets" not in nb.metadata


def test_a_page_is_the_notebook_without_its_colab_cell():
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("```mermaid\ngraph LR\n  a --> b\n```"),
            nbformat.v4.new_code_cell("# colab"),
            nbformat.v4.new_code_cell("x = 1"),
        ]
    )
    nb.cells[1]["id"] = "course-colab"
    page = S.prepare(nb, "lecture", LINKS, "notebooks/00.ipynb")
    assert [c.source for c in page.cells[1:]] == ["x = 1"]
    assert page.cells[0].source.startswith('<pre class="mermaid">')


# --------------------------------------------------------------------------- the pages' text


def test_the_launch_table_opens_each_chapter_in_colab_and_binder():
    table = S.launch_table(
        LINKS, [Path("notebooks/00_setup.ipynb"), Path("notebooks/01_rnn.ipynb")],
        [Path("exercises/00_setup.ipynb")],
    )  # fmt: skip
    lines = table.splitlines()
    assert lines[:2] == ["| chapter | lecture | exercises |", "|---|---|---|"]
    ex = "exercises/00_setup.ipynb"
    assert lines[2].startswith("| [00_setup](notebooks/00_setup) | [Colab](")
    assert lines[2].endswith(f"| [Colab]({LINKS.colab(ex)}) · [Binder]({LINKS.binder(ex)}) |")
    assert lines[3].endswith(" |  |")  # no exercises for chapter 01
    assert "badge" not in table  # badge images would be fetched from the internet


def test_the_front_page_lists_what_exists(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notation.md").write_text("# n")
    page = S.index_page(tmp_path, LINKS, [Path("notebooks/00_setup.ipynb")], [])
    assert page.startswith(f"# {S.TITLE}\n") and f"[the repository]({URL})" in page
    assert ":caption: Lectures" in page and "\nnotebooks/00_setup\n" in page
    assert "\ndocs/notation\n" in page and "docs/conventions" not in page


def test_the_sphinx_configuration_names_the_repository_and_no_cdn():
    conf = S.CONF.format(title=S.TITLE, repo=URL, branch="spring", footer=S.LICENCE_FOOTER)
    namespace: dict = {}
    exec(conf, namespace)  # valid Python, as Sphinx reads it
    assert namespace["html_theme_options"]["repository_url"] == URL
    assert namespace["html_theme_options"]["repository_branch"] == "spring"
    assert namespace["mathjax_path"] == "mathjax/tex-svg-full.js"
    assert namespace["nb_execution_mode"] == "off" and namespace["nb_ipywidgets_js"] == {}
    footer = namespace["html_theme_options"]["extra_footer"]  # under every page
    assert "Creative Commons Attribution 4.0" in footer and "MIT License" in footer


def test_the_front_page_states_the_licences():
    page = S.index_page(Path("."), LINKS, [], [])
    licence = page[page.index("## Licence") :]
    assert "CC BY 4.0" in licence and "MIT License" in licence
    assert "LICENSE-CONTENT" in licence and "SECURITY.md" in licence


def test_external_references_are_found(tmp_path):
    (tmp_path / "a.html").write_text(
        '<link rel="canonical" href="https://example.org/a.html">'
        '<a href="https://colab.research.google.com/x">Colab</a>'
        '<script src="_static/local.js"></script>'
    )
    assert S.external_references(tmp_path) == []
    (tmp_path / "b.html").write_text('<script src="https://cdn.example.org/mathjax.js"></script>')
    (tmp_path / "c.css").write_text("body { background: url(//fonts.example.org/f.woff) }")
    found = S.external_references(tmp_path)
    assert (
        len(found) == 2 and any("b.html" in f for f in found) and any("c.css" in f for f in found)
    )


def test_a_stylesheet_or_an_image_from_elsewhere_is_found_too(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "p.html").write_text(
        '<link rel="stylesheet" href="//cdn.example.org/s.css"><img src="http://x.org/i.png">'
    )
    found = S.external_references(tmp_path)
    assert len(found) == 2 and all(f.startswith("sub/p.html: <") for f in found)


# --------------------------------------------------------------------------- assets, cache


def test_bundled_assets_already_fetched_need_no_npm(tmp_path, monkeypatch):
    static = tmp_path / "static"
    for _, dest in S.ASSETS.values():
        (static / dest).parent.mkdir(parents=True, exist_ok=True)
        (static / dest).write_text("// bundled")
    monkeypatch.setattr(S.shutil, "which", lambda name: None)
    assert S.fetch_assets(tmp_path) == static
    (static / "mermaid" / "mermaid.min.js").unlink()
    with pytest.raises(S.SiteError, match="`npm` was not found"):
        S.fetch_assets(tmp_path)


def test_the_code_hash_follows_course_libs_sources(tmp_path):
    (tmp_path / "course_lib").mkdir()
    (tmp_path / "course_lib" / "a.py").write_text("x = 1\n")
    first = S._code_hash(tmp_path)
    (tmp_path / "course_lib" / "notes.txt").write_text("not code")
    assert S._code_hash(tmp_path) == first
    (tmp_path / "course_lib" / "a.py").write_text("x = 2\n")
    assert S._code_hash(tmp_path) != first and len(first) == 16


def test_an_unchanged_notebook_is_taken_from_the_cache(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    path = tmp_path / "00_setup.ipynb"
    nbformat.write(nb, path)
    cache = tmp_path / "cache"
    cache.mkdir()
    digest = hashlib.sha256(path.read_bytes() + b"ci:abc").hexdigest()[:16]
    executed = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("1 + 1", execution_count=1)]
    )
    nbformat.write(executed, cache / f"00_setup.{digest}.ipynb")
    said = io.StringIO()
    done = S.execute_all([path], cache, "ci:abc", "ci", 1, said)
    assert done[path].cells[0].execution_count == 1 and said.getvalue() == ""  # nothing ran


# --------------------------------------------------------------------------- stopping early


def test_a_release_build_refuses_the_placeholder_before_any_work(monkeypatch):
    placeholder = L.Links("https://github.com/OWNER/attention-course")
    monkeypatch.setenv("COURSE_RELEASE", "1")
    monkeypatch.setattr(S.Links, "load", classmethod(lambda cls, root: placeholder))
    with pytest.raises(S.SiteError, match="placeholder"):  # make site, before any work
        S.build(ROOT, ROOT / "build" / "never", only=["00"])
    assert not (ROOT / "build" / "never").exists()


def test_no_chosen_lecture_stops_the_build(tmp_path, monkeypatch):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "pyproject.toml").write_text(f'[project.urls]\nRepository = "{URL}"\n')
    monkeypatch.setattr(S, "fetch_assets", lambda cache: cache / "static")
    with pytest.raises(S.SiteError, match=r"no lecture notebooks selected \(only=\['99'\]\)"):
        S.build(tmp_path, tmp_path / "out", only=["99"], out=io.StringIO())


def test_the_command_says_what_is_wrong(tmp_path, capsys):
    assert S.main(["--course", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith("error:")
    with pytest.raises(SystemExit):
        S.main(["--budget", "short"])
