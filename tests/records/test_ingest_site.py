"""`harness ingest --site FILE`: the site's shared runs directory is where an ingested run goes, and
a bare `wandb:RUN_ID` names a run of the site's W&B project; a site that cannot say is one line."""

from pathlib import Path


def write_site(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_an_ingested_run_goes_to_the_sites_runs_dir(vime_logs, tmp_path, harness_cli):
    shared = tmp_path / "shared-runs"
    site = write_site(tmp_path / "site.yaml", f"runs-dir: {shared}\n")
    code, out, err = harness_cli("ingest", vime_logs / "colocate_3_rollouts.log", "--site", site)
    assert code == 0, err
    run_dir = Path(out.strip().splitlines()[-1])
    assert run_dir.parent == shared and (run_dir / "metrics.jsonl").is_file()


def test_runs_dir_on_the_command_line_wins_over_the_site(vime_logs, tmp_path, harness_cli):
    site = write_site(tmp_path / "site.yaml", f"runs-dir: {tmp_path / 'shared'}\n")
    code, out, err = harness_cli("ingest", vime_logs / "colocate_3_rollouts.log", "--site", site, "--runs-dir", tmp_path / "mine")
    assert code == 0, err
    assert Path(out.strip().splitlines()[-1]).parent == tmp_path / "mine"


def test_a_bare_wandb_run_id_without_the_sites_entity_is_one_line(tmp_path, harness_cli):
    site = write_site(tmp_path / "site.yaml", "wandb:\n  project: vime-mismatch\n")
    code, out, err = harness_cli("ingest", "wandb:abc123", "--site", site, "--json")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "wandb.entity" in lines[0] and str(site) in lines[0] and "wandb:ENTITY/PROJECT/abc123" in lines[0]


def test_a_bare_wandb_run_id_is_a_run_of_the_sites_project(tmp_path):
    from harness.records.command import site_run_path
    from harness.spec.site import load_site

    site = load_site(write_site(tmp_path / "site.yaml", "wandb:\n  project: vime-mismatch\n  entity: my-team\n"))
    assert site_run_path("wandb:abc123", site) == "wandb:my-team/vime-mismatch/abc123"
    # Every other form is the user's own and stays as given.
    assert site_run_path("wandb:other/proj/abc123", site) == "wandb:other/proj/abc123"
    assert site_run_path("logs/run.log", site) == "logs/run.log"


def test_an_unknown_site_key_is_one_line(vime_logs, tmp_path, harness_cli):
    site = write_site(tmp_path / "site.yaml", "run-dir: /typo\n")
    code, _, err = harness_cli("ingest", vime_logs / "colocate_3_rollouts.log", "--site", site, "--json")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "run-dir" in err
