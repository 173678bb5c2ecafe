"""The operator's dashboard and alert rules (issue 15; docs/operations.md): deploy/grafana/
opentunnel.json and deploy/prometheus/{alerts,alerts_test,prometheus}.yml.

- promtool accepts the rules and the example scrape configuration, and the rules' unit tests pass;
  every alert has a case where it fires and one where it does not, and a runbook section.
- The dashboard is what deploy/grafana/make_dashboard.py writes, is shaped as Grafana 10 loads it,
  and every query of every panel (and of the variables) parses: promtool has no parse-only
  command for expressions, so they become recording rules of a generated file, Grafana's
  variables substituted, checked by `promtool check rules`.
- Every metric the dashboard and the rules name is one the real daemons export: a controld +
  relayd pair with the mesh on (INTERNAL_LISTEN on 127.0.4.1, no peers) is started and both
  /metrics scraped. All the names used are there from the start (every label value is
  registered at start, docs/reliability.md), so none is checked against docs/ instead; the only
  other name allowed is Prometheus's own `up`. The label matchers and groupings the queries use
  are checked against the same scrape too (a label the metric lacks, or an `=` value it never
  takes, would make a panel or an alert silently empty). And the scraped series, held flat for
  two hours with the target labels and up = 1, raise no alert: a healthy idle machine is quiet.
- A real Prometheus (Debian's, as promtool) scrapes the same pair every second with the target
  labels of prometheus.yml and evaluates alerts.yml: every rule evaluates without an error
  (vector matching errors show only on real series) and stays inactive, and every panel's
  queries, sent as Grafana sends them for "All", return series.
"""
import json
import re
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

import harness
import relay_harness as rh

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "opentunnel.json"
OPERATIONS = ROOT / "docs" / "operations.md"
ADDRESS = "127.0.4.1"  # this file's loopback range: 127.0.4.x
TOKEN = "a-mesh-secret-of-at-least-32-bytes-for-tests"
PROMTOOL = "/usr/bin/promtool"  # Debian's prometheus package (deploy/install-deps.sh)
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}  # nothing inherited

# What Grafana puts in place of its variables before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$__interval": "30s", "$__range": "6h",
                     "${datasource}": "", "$region": ".*", "$machine": ".*"}


def promtool(*args, cwd=PROMETHEUS):
    result = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, timeout=120,
                            env=CLEAN_ENV)
    return result.returncode, (result.stdout + result.stderr).decode()


def alert_rules():
    groups = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard():
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def panel_queries(board):
    """(panel title, expression) of every target of every panel, rows' nested panels included."""
    out = []
    for panel in board["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                out.append((inner["title"], target["expr"]))
    return out


def variable_queries(board):
    """The selectors inside the query variables' label_values(selector, label)."""
    out = []
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.*), *([a-zA-Z_]\w*)\)", variable["definition"])
        assert match, f"variable {variable['name']}: {variable['definition']}"
        out.append((f"variable {variable['name']}", match.group(1)))
    return out


def substitute(expr, rate_interval="1m"):
    """The query Grafana sends with "All" chosen; `rate_interval` in place of $__rate_interval
    (Grafana's is four scrape intervals or more)."""
    expr = expr.replace("$__rate_interval", rate_interval)
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a Grafana variable this test does not know: {expr}"
    return expr


# ---- the rules -------------------------------------------------------------------------------

def test_promtool_checks_the_rules_and_the_scrape_configuration():
    code, output = promtool("check", "rules", "alerts.yml")
    assert code == 0, output
    code, output = promtool("check", "config", "prometheus.yml")
    assert code == 0, output


def test_promtool_unit_tests_of_the_rules_pass():
    code, output = promtool("test", "rules", "alerts_test.yml")
    assert code == 0, output
    assert "SUCCESS" in output, output


def test_every_alert_is_tested_firing_and_quiet_and_has_a_runbook_section():
    tests = yaml.safe_load((PROMETHEUS / "alerts_test.yml").read_text(encoding="utf-8"))["tests"]
    fires, quiet = set(), set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    runbook = OPERATIONS.read_text(encoding="utf-8")
    headings = set(re.findall(r"^#+ (OpenTunnel\w+)$", runbook, re.M))
    problems = []
    for rule in alert_rules():
        name = rule["alert"]
        if name not in fires:
            problems.append(f"{name}: no test case where it fires")
        if name not in quiet:
            problems.append(f"{name}: no test case where it stays quiet")
        anchor = rule["annotations"].get("runbook_url", "")
        if anchor != f"docs/operations.md#{name.lower()}":
            problems.append(f"{name}: runbook_url {anchor!r}")
        if name not in headings:
            problems.append(f"{name}: no section \"### {name}\" in docs/operations.md")
        if rule.get("labels", {}).get("severity") not in ("warning", "critical"):
            problems.append(f"{name}: severity {rule.get('labels')}")
    assert not problems, "\n".join(problems)


# ---- the dashboard ---------------------------------------------------------------------------

def test_the_dashboard_is_what_its_generator_writes():
    result = subprocess.run(["/usr/bin/python3", str(GRAFANA / "make_dashboard.py"), "--check"],
                            capture_output=True, timeout=60, env=CLEAN_ENV)
    assert result.returncode == 0, ("deploy/grafana/opentunnel.json differs from what "
                                    "make_dashboard.py writes: run it")


def test_the_dashboard_is_shaped_as_grafana_10_loads_it():
    board = dashboard()
    assert board["schemaVersion"] == 38  # Grafana 10.0 to 10.1 write 38; later 10.x migrate it
    assert board["uid"] == "opentunnel" and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("region", "machine"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"]
    ids = set()
    for panel in board["panels"]:
        assert panel["id"] not in ids, f"panel id {panel['id']} twice"
        ids.add(panel["id"])
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["type"] in ("timeseries", "stat"), panel["type"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], f"{panel['title']}: no query"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            # Every query follows the region and machine variables.
            assert 'region=~"$region"' in target["expr"], (panel["title"], target["expr"])
            assert 'machine_id=~"$machine"' in target["expr"], (panel["title"], target["expr"])
    # Panels do not overlap.
    taken = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps at {x},{y}"
                taken.add((x, y))


def test_every_dashboard_query_parses(tmp_path):
    board = dashboard()
    queries = panel_queries(board) + variable_queries(board)
    assert len(queries) >= 50, len(queries)
    rules = [{"record": f"dashboard:query_{index}", "expr": substitute(expr)}
             for index, (_, expr) in enumerate(queries)]
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    code, output = promtool("check", "rules", str(path), cwd=tmp_path)
    if code != 0:
        # Name the panel of each expression promtool refused.
        named = "\n".join(f"dashboard:query_{i}: {title}: {expr}"
                          for i, (title, expr) in enumerate(queries))
        raise AssertionError(f"{output}\n{named}")
    assert f"SUCCESS: {len(rules)} rules found" in output, output


# ---- the names against the real daemons ------------------------------------------------------

_FUNCTION_OR_KEYWORD = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                        "group_right", "offset", "bool", "inf", "nan"}


def metric_names(expr):
    """The metric names an expression selects: strings, label matchers, range durations and
    grouping clauses removed, then every identifier that is not a function call or a keyword."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\boffset\s+\w+", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in _FUNCTION_OR_KEYWORD:
            continue
        names.add(word)
    return names


def test_metric_names_of_an_expression():
    assert metric_names('sum by (le, kind) (rate(opentunnel_a_bucket{x=~"a|b"}[5m])) > 1') == {
        "opentunnel_a_bucket"}
    assert metric_names("a - a offset 1h > 3 * clamp_min(b + c, 0)") == {"a", "b", "c"}
    assert metric_names('x < on () group_left () (count(up{job="j"} == 1) - 1)') == {"x", "up"}


def used_names():
    """name -> where it is used, for the dashboard's queries and the rules' expressions."""
    board = dashboard()
    uses = {}
    for title, expr in panel_queries(board) + variable_queries(board):
        for name in metric_names(substitute(expr)):
            uses.setdefault(name, []).append(f"dashboard: {title}")
    for rule in alert_rules():
        for name in metric_names(rule["expr"]):
            uses.setdefault(name, []).append(f"alert {rule['alert']}")
    return uses


def scrape(port):
    with urllib.request.urlopen(f"http://{ADDRESS}:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        return response.read().decode()


TARGET_LABELS = {"job", "instance", "region", "machine_id"}  # added by the scrape


def selectors(expr):
    """(metric, [(label, operator, value)]) of every selector with label matchers."""
    out = []
    for match in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}", expr):
        matchers = re.findall(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"',
                              match.group(2))
        out.append((match.group(1), matchers))
    return out


def grouping_labels(expr):
    labels = set()
    for clause in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        labels.update(label.strip() for label in clause.split(",") if label.strip())
    return labels


def series_labels(text):
    """{sample name: {label: {values}}} of an exposition."""
    out = {}
    for name, labels, _ in samples(text):
        entry = out.setdefault(name, {})
        for label, value in labels.items():
            entry.setdefault(label, set()).add(value)
    return out


def label_problems(where, expr, labels_of):
    """Matchers naming a label the metric does not have or a value it never takes, and
    grouping labels none of the expression's metrics has: queries that would be silently
    empty or ungrouped."""
    problems = []
    known = set(TARGET_LABELS) | {"le"}
    for metric in metric_names(expr):
        known.update(labels_of.get(metric, {}))
    for metric, matchers in selectors(expr):
        if metric == "up":
            continue
        have = labels_of.get(metric, {})
        for label, operator, value in matchers:
            if label in TARGET_LABELS:
                continue
            if label not in have:
                problems.append(f"{where}: {metric} has no label {label}")
            elif operator == "=" and value not in have[label]:
                problems.append(f"{where}: {metric}{{{label}}} never is {value!r}")
            elif operator == "=~" and not any(re.fullmatch(value, v) for v in have[label]):
                problems.append(f"{where}: {metric}{{{label}=~{value!r}}} matches nothing")
    for label in grouping_labels(expr) - known:
        problems.append(f"{where}: grouping by {label}, a label of none of its metrics")
    return problems


def samples(text):
    """(name, {label: value}, value) of every sample line of an exposition."""
    out = []
    for name, labels, value in re.findall(
            r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$", text, re.M):
        pairs = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels))
        out.append((name, pairs, value))
    return out


def healthy_machine_raises_no_alert(tmp_path, relayd_text, controld_text):
    """The real series of an idle, healthy machine, held for two hours (counters flat), with the
    scrape's target labels and up = 1: no alert may fire (an inverted or mistyped condition
    would)."""
    series = []
    for job, port, text in (("opentunnel-relayd", 9091, relayd_text),
                            ("opentunnel-controld", 9092, controld_text)):
        target = {"job": job, "instance": f"{ADDRESS}:{port}", "region": "test",
                  "machine_id": "ops-a"}
        series.append({"series": "up" + labelset(target), "values": "1x120"})
        for name, labels, value in samples(text):
            series.append({"series": name + labelset({**labels, **target}),
                           "values": f"{value}x120"})
    checks = [{"eval_time": "110m", "alertname": rule["alert"], "exp_alerts": []}
              for rule in alert_rules()]
    path = tmp_path / "healthy_test.yml"
    path.write_text(yaml.safe_dump({
        "rule_files": [str(PROMETHEUS / "alerts.yml")], "evaluation_interval": "1m",
        "tests": [{"name": "an idle healthy machine", "interval": "1m",
                   "input_series": series, "alert_rule_test": checks}]}))
    code, output = promtool("test", "rules", str(path), cwd=tmp_path)
    assert code == 0, output


def labelset(labels):
    return "{" + ", ".join(f'{key}="{value}"' for key, value in sorted(labels.items())) + "}"


def exported(text):
    """{sample name: type} of an exposition: families by their # TYPE lines, histograms also by
    their _bucket, _count and _sum series."""
    names = {}
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names[name] = kind
        if kind == "histogram":
            for suffix in ("_bucket", "_count", "_sum"):
                names[name + suffix] = kind
    return names


class Machine:
    """A controld + relayd pair with the mesh on (no peers), on ADDRESS; metrics_ports[job]."""

    def __init__(self, workdir):
        internal_port = harness.free_port(ADDRESS)
        controld_metrics = harness.free_port(ADDRESS)
        common = {"INTERNAL_LISTEN": f"{ADDRESS}:{internal_port}", "INTERNAL_TOKEN": TOKEN,
                  "MACHINE_ID": "ops-a", "REGION": "test"}
        self.stack = rh.Stack(workdir,
                              controld_env={**common, "MESH_PING_MS": "100",
                                            "MESH_DEAD_MS": "500",
                                            "METRICS_LISTEN": f"{ADDRESS}:{controld_metrics}"},
                              relayd_env={**common, "METRICS_LISTEN": f"{ADDRESS}:0",
                                          "SHUTDOWN_DRAIN_MS": "200"})
        self.metrics_ports = {"opentunnel-relayd": self.stack.relayd.metrics_port,
                              "opentunnel-controld": controld_metrics}

        # The per-machine table gauge names this machine once the mesh's first tick ran.
        def controld_with_table_gauge():
            text = scrape(controld_metrics)
            return text if "opentunnel_mesh_table_bridges{" in text else None
        harness.wait_until(controld_with_table_gauge, 30, "controld's mesh table gauge")


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    started = Machine(tmp_path_factory.mktemp("machine"))
    try:
        yield started
    finally:
        started.stack.close()


def test_every_metric_the_dashboard_and_the_rules_use_is_exported(machine, tmp_path):
    uses = used_names()
    assert len(uses) >= 40, sorted(uses)
    relayd_text = scrape(machine.metrics_ports["opentunnel-relayd"])
    controld_text = scrape(machine.metrics_ports["opentunnel-controld"])
    healthy_machine_raises_no_alert(tmp_path, relayd_text, controld_text)
    names = {**exported(relayd_text), **exported(controld_text)}
    missing = {name: where for name, where in uses.items()
               if name not in names and name != "up"}
    assert not missing, "\n".join(f"{name} (used by {', '.join(sorted(set(where)))}) is exported "
                                  f"by neither daemon" for name, where in sorted(missing.items()))
    # The rules' rate()s and histogram_quantile()s are over counters and histograms.
    for name in uses:
        if name.endswith("_total"):
            assert names[name] == "counter", (name, names[name])
    # Label names and values the queries select on are those the daemons export.
    labels_of = {**series_labels(relayd_text), **series_labels(controld_text)}
    board = dashboard()
    problems = []
    for title, expr in panel_queries(board) + variable_queries(board):
        problems += label_problems(f"dashboard: {title}", substitute(expr), labels_of)
    for rule in alert_rules():
        problems += label_problems(f"alert {rule['alert']}", rule["expr"], labels_of)
    assert not problems, "\n".join(problems)


# ---- a real Prometheus over the real daemons -------------------------------------------------

PROMETHEUS_BIN = "/usr/bin/prometheus"  # Debian's prometheus package, as promtool


class Prometheus:
    """Prometheus scraping `machine` every second with the target labels of prometheus.yml and
    evaluating alerts.yml every second; its API on ADDRESS."""

    def __init__(self, workdir, machine):
        self.port = harness.free_port(ADDRESS)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(PROMETHEUS / "alerts.yml")],
            "scrape_configs": [
                {"job_name": job,
                 "static_configs": [{"targets": [f"{ADDRESS}:{port}"],
                                     "labels": {"region": "test", "machine_id": "ops-a"}}]}
                for job, port in machine.metrics_ports.items()],
        }
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        self.log_path = workdir / "prometheus.log"
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [PROMETHEUS_BIN, f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address={ADDRESS}:{self.port}"],
            env=CLEAN_ENV, stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path, **params):
        if self.process.poll() is not None:
            raise RuntimeError("prometheus exited:\n"
                               + self.log_path.read_text(encoding="utf-8")[-3000:])
        query = urllib.parse.urlencode(params)
        url = f"http://{ADDRESS}:{self.port}{path}" + (f"?{query}" if query else "")
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read().decode())

    def query(self, expr):
        answer = self.get("/api/v1/query", query=expr)
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]

    def close(self):
        harness.stop_process(self.process)
        self.log.close()


def ready(prometheus):
    try:
        return prometheus.get("/api/v1/status/runtimeinfo")["status"] == "success"
    except OSError:
        return False


def test_a_real_prometheus_evaluates_every_rule_and_answers_every_panel(machine, tmp_path):
    prometheus = Prometheus(tmp_path / "prometheus", machine)
    try:
        harness.wait_until(lambda: ready(prometheus), 30, "prometheus to serve its API")
        # Enough scrapes of both daemons for rate() over the panels' interval.
        harness.wait_until(
            lambda: len(prometheus.query("count_over_time(up[1m]) >= 4")) == 2, 30,
            "four scrapes of both daemons")
        assert {r["metric"]["job"] for r in prometheus.query("up == 1")} == set(
            machine.metrics_ports)

        # Every rule loaded and evaluated without an error (matching errors, for one, show
        # only when a rule meets real series).
        def evaluated():
            rules = [rule for group in prometheus.get("/api/v1/rules")["data"]["groups"]
                     for rule in group["rules"]]
            return rules if all(rule["health"] != "unknown" for rule in rules) else None
        rules = harness.wait_until(evaluated, 30, "every rule evaluated")
        assert len(rules) == len(alert_rules())
        problems = [f"{rule['name']}: {rule.get('lastError')}" for rule in rules
                    if rule["health"] != "ok"]
        problems += [f"{rule['name']} is {rule['state']} on a healthy idle machine"
                     for rule in rules if rule["state"] != "inactive"]
        assert not problems, "\n".join(problems)

        # Every panel's queries run, with the variables as Grafana sends them for "All", and
        # find series even on an idle machine (every label value is registered at start).
        empty = []
        for title, expr in panel_queries(dashboard()):
            query = substitute(expr, rate_interval="15s")
            if not prometheus.query(query):
                empty.append(f"{title}: {query}")
        assert not empty, "panels without a series:\n" + "\n".join(empty)
        # The variables' values are the target labels.
        regions = prometheus.get("/api/v1/label/region/values", **{
            "match[]": "opentunnel_uptime_seconds"})["data"]
        assert regions == ["test"], regions
    finally:
        prometheus.close()
