"""The experiment record: Allure labels and attachments, plots, the summary table, the HTML report.

allure_attach  label_experiment / attach_run / attach_plot / attach_table, called by every
               experiment test; each is a no-op when pytest runs without --alluredir
plots          per-rung figures (abs-diff with the parent overlaid, reward, step-time breakdown)
audit_plots    dlogp histogram and worst-token table from an audit (plain arrays / dicts)
summary        the seed's summary table: SummaryRow, summary_row_from_run, write_summary
flags          describe_precision / describe_operator_path / describe_hardware of a run
summary_figure the summary table as a PNG (Allure shows images in full)
tables         rows as Markdown or CSV
envprops       environment.properties for the Allure results directory
report         build_report: the Allure 3 HTML report from reports/allure-results
record_model   the experiment record's pydantic models (ExperimentRecord and its entries), shared by writer and page
experiment_record  the session's experiment.json: entries from the judged tests, load_record
experiment_page    reports/experiment/index.html from a record (table, ladder, A/B, environment)
ladder_figure  the ladder as one inline SVG (abs-diff per rung, classes, parents, floors)
results_records    reports/records/*.json: a finished job's record condensed for docs/results.md (--add)
results_page       docs/results.md generated from the committed records (`python -m harness results`)
results_calibration, results_bench   its sections from knobs/design.yaml, reports/controls/, reports/bench/
results_format     how that page writes numbers and each figure's record line
command        `python -m harness report` and `python -m harness results`
"""
