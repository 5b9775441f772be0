"""The experiment record: Allure labels and attachments, plots, the summary table, the HTML report.

    allure_attach  label_experiment / attach_run / attach_plot / attach_table, called by every
                   experiment test; each is a no-op when pytest runs without --alluredir
    plots          per-rung figures (abs-diff with the parent overlaid, reward, step-time breakdown)
    audit_plots    dlogp histogram and worst-token table from an audit (plain arrays / dicts)
    summary        the seed's summary table: SummaryRow, describe_precision/operator_path, writers
    envprops       environment.properties for the Allure results directory
    report         `python -m harness report`: Allure 3 HTML report from reports/allure-results
"""
