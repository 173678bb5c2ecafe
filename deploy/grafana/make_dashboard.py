#!/usr/bin/python3
"""Writes deploy/grafana/opentunnel.json, the Grafana dashboard over both daemons' metrics.

The dashboard is generated so that its layout (ids, positions) stays consistent and each query is
written once here; edit this file and run it (`/usr/bin/python3 deploy/grafana/make_dashboard.py`)
rather than editing the JSON. The test "deploy: dashboards and alerts" checks that the JSON is
what this script writes, that every query parses, and that every metric it names is exported.

Grafana 10 (schemaVersion 38). Variables: datasource (any Prometheus), region and machine (the
target labels region and machine_id of deploy/prometheus/prometheus.yml, several or all).
"""
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "opentunnel.json"

# Every query is narrowed to the chosen regions and machines.
SEL = 'region=~"$region", machine_id=~"$machine"'
RATE = "$__rate_interval"
DS = {"type": "prometheus", "uid": "${datasource}"}


def q(expr, legend=""):
    return {"expr": expr, "legend": legend}


def panel(title, queries, unit="short", kind="timeseries", description="", width=8, stack=False):
    return {"title": title, "queries": queries, "unit": unit, "kind": kind,
            "description": description, "width": width, "stack": stack}


def rate(metric, by, extra="", window=RATE):
    labels = SEL + (", " + extra if extra else "")
    return f"sum by ({by}) (rate({metric}{{{labels}}}[{window}]))"


def hourly(metric, by, extra=""):
    labels = SEL + (", " + extra if extra else "")
    return f"sum by ({by}) (increase({metric}{{{labels}}}[1h]))"


def quantile(phi, metric, by):
    by_le = f"le, {by}" if by else "le"
    return (f"histogram_quantile({phi}, sum by ({by_le}) "
            f"(rate({metric}_bucket{{{SEL}}}[{RATE}])))")


ROWS = [
    ("Overview", [
        panel("relayd machines up",
              [q(f'count(up{{job="opentunnel-relayd", {SEL}}} == 1)')], kind="stat", width=4,
              description="relayd targets answering their scrape."),
        panel("Bridges attached", [q(f"sum(opentunnel_bridges_attached{{{SEL}}})")],
              kind="stat", width=4),
        panel("Visitors open", [q(f"sum(opentunnel_visitor_connections_open{{{SEL}}})")],
              kind="stat", width=4,
              description="Public tunnel connections held, forwarded ones on both machines."),
        panel("Control sessions up", [q(f"sum(opentunnel_control_connected{{{SEL}}})")],
              kind="stat", width=4,
              description="relayds with their control session to controld up: one per machine."),
        panel("Mesh peers not up", [q(f'sum(opentunnel_mesh_peers{{{SEL}, state!="up"}})')],
              kind="stat", width=4,
              description="Peer addresses connecting or unreachable, over the chosen machines."),
        panel("Certificates expiring", [q(f"sum(opentunnel_certificates_expiring{{{SEL}}})")],
              kind="stat", width=4,
              description="Ready certificates of tunnels with a bridge here that expire within "
                          "14 days (renewal starts at 30)."),
    ]),
    ("Bridges", [
        panel("Bridges attached by machine",
              [q(f"sum by (machine_id) (opentunnel_bridges_attached{{{SEL}}})", "{{machine_id}}")]),
        panel("Attaches by result", [q(rate("opentunnel_bridge_attaches_total", "result"),
                                       "{{result}}")], unit="ops", stack=True),
        panel("Detaches by reason", [q(rate("opentunnel_bridge_detaches_total", "reason"),
                                       "{{reason}}")], unit="ops", stack=True),
        panel("Backpressure and limits",
              [q(rate("opentunnel_bridge_backpressure_total", "event"), "backpressure {{event}}"),
               q(f"sum(rate(opentunnel_bridge_fragment_limit_total{{{SEL}}}[{RATE}]))",
                 "fragment limit"),
               q(rate("opentunnel_relay_peer_backlog_total", "event"), "peer backlog {{event}}")],
              unit="ops"),
        panel("Bridge TLS state after the handshake",
              [q(rate("opentunnel_bridge_tls_detach_total", "result"), "{{result}}")],
              unit="ops", stack=True),
    ]),
    ("Visitors", [
        panel("Visitors by outcome",
              [q(rate("opentunnel_visitor_connections_total", "outcome"), "{{outcome}}")],
              unit="ops", stack=True,
              description="served_local, forwarded_out/forwarded_in (the mesh), and the "
                          "rejections; unknown tunnels and bad hellos are mostly scanners."),
        panel("Visitors open by machine",
              [q(f"sum by (machine_id) (opentunnel_visitor_connections_open{{{SEL}}})",
                 "{{machine_id}}")]),
        panel("Visitor connection duration",
              [q(quantile(0.5, "opentunnel_visitor_connection_duration_seconds", ""), "p50"),
               q(quantile(0.99, "opentunnel_visitor_connection_duration_seconds", ""), "p99")],
              unit="s"),
        panel("Connections shed",
              [q(rate("opentunnel_connections_shed_total", "reason"), "{{reason}}")],
              unit="ops", stack=True,
              description="handshakes/connections: the machine is saturated; source_*: one "
                          "address over its share; draining_bridges: during a drain."),
    ]),
    ("Bytes", [
        panel("Visitor bytes",
              [q(rate("opentunnel_visitor_bytes_total", "direction"), "{{direction}}")],
              unit="Bps", description="Counted on the machine holding the bridge."),
        panel("Bytes buffered in relayd",
              [q(f"sum by (machine_id) (opentunnel_relay_buffered_bytes{{{SEL}}})",
                 "{{machine_id}}")], unit="bytes"),
        panel("Mesh link bytes",
              [q(rate("opentunnel_mesh_bytes_total", "direction"), "{{direction}}")],
              unit="Bps"),
    ]),
    ("API and TLS", [
        panel("API TLS handshakes",
              [q(rate("opentunnel_api_tls_handshakes_total", "result"), "{{result}}")],
              unit="ops", stack=True,
              description="TLS for the API domain; through Cloudflare a failed one is a 525."),
        panel("API TLS sessions",
              [q(rate("opentunnel_api_tls_sessions_total", "handshake"), "{{handshake}}")],
              unit="ops", stack=True),
        panel("API responses by status",
              [q(rate("opentunnel_http_requests_total", "status_class", 'server="api"'),
                 "{{status_class}}")], unit="ops", stack=True),
        panel("Requests refused",
              [q(rate("opentunnel_requests_limited_total", "limit"), "limited {{limit}}"),
               q(rate("opentunnel_auth_failures_total", "kind"), "auth failure {{kind}}"),
               q(f"sum(rate(opentunnel_api_client_address_invalid_total{{{SEL}}}[{RATE}]))",
                 "client address invalid")], unit="ops"),
        panel("API proxying and connections",
              [q(f"sum(rate(opentunnel_api_proxy_failures_total{{{SEL}}}[{RATE}]))",
                 "relayd: proxy failures"),
               q(rate("opentunnel_http_connections_rejected_total", "server"),
                 "controld {{server}}: rejected")], unit="ops"),
        panel("controld HTTP connections open",
              [q(f"sum by (server) (opentunnel_http_connections_open{{{SEL}}})", "{{server}}")]),
    ]),
    ("Certificates", [
        panel("Issuance jobs finished (per hour)",
              [q(hourly("opentunnel_acme_attempts_total", "kind, outcome"),
                 "{{kind}} {{outcome}}")], stack=True),
        panel("CA attempt failures by class (per hour)",
              [q(hourly("opentunnel_acme_failures_total", "class"), "{{class}}")], stack=True),
        panel("Issuance attempt duration",
              [q(quantile(0.5, "opentunnel_acme_issuance_duration_seconds", "kind"),
                 "p50 {{kind}}"),
               q(quantile(0.99, "opentunnel_acme_issuance_duration_seconds", "kind"),
                 "p99 {{kind}}")], unit="s"),
        panel("Certificate jobs (whole database)",
              [q(f"max by (status) (opentunnel_certificate_jobs{{{SEL}}})", "{{status}}")],
              description="pending now, failed in the last 24 h; every machine reports the "
                          "same count, so this takes the max."),
        panel("CA cool-downs and challenge records (per hour)",
              [q(f"sum(increase(opentunnel_acme_cooldowns_total{{{SEL}}}[1h]))", "cool-downs"),
               q(hourly("opentunnel_acme_dns_records_total", "event"), "DNS records {{event}}")]),
        panel("Certificates expiring within 14 days",
              [q(f"sum by (machine_id) (opentunnel_certificates_expiring{{{SEL}}})",
                 "{{machine_id}}")]),
    ]),
    ("Database", [
        panel("Query latency p99 by operation",
              [q(quantile(0.99, "opentunnel_db_query_duration_seconds", "operation"),
                 "{{operation}}")], unit="s",
              description="Store calls, the wait for a pooled connection included."),
        panel("Queries by operation",
              [q(rate("opentunnel_db_query_duration_seconds_count", "operation"),
                 "{{operation}}")], unit="ops", stack=True),
        panel("Errors by operation",
              [q(rate("opentunnel_db_errors_total", "operation"), "{{operation}}")],
              unit="ops", stack=True, description="Failed and timed-out statements."),
        panel("Connection pool",
              [q(f"sum by (machine_id, state) (opentunnel_db_pool_connections{{{SEL}}})",
                 "{{machine_id}} {{state}}")]),
        panel("Expired rate-limit rows pruned (per hour)",
              [q(f"sum(increase(opentunnel_rate_limit_rows_pruned_total{{{SEL}}}[1h]))",
                 "pruned")]),
    ]),
    ("Processes", [
        panel("Descriptors used (of the soft limit)",
              [q(f"opentunnel_process_open_fds{{{SEL}}} / opentunnel_process_max_fds{{{SEL}}}",
                 "{{machine_id}} {{job}}")], unit="percentunit",
              description="The fd-leak signal: alert above half."),
        panel("Resident memory",
              [q(f"opentunnel_process_resident_memory_bytes{{{SEL}}}", "{{machine_id}} {{job}}")],
              unit="bytes"),
        panel("relayd loop handles",
              [q(f"opentunnel_loop_handles{{{SEL}}}", "{{machine_id}}"),
               q(f"opentunnel_loop_handles{{{SEL}}} / (opentunnel_bridges_attached{{{SEL}}} "
                 f"+ opentunnel_visitor_connections_open{{{SEL}}} + 1)",
                 "{{machine_id}} per bridge or visitor")],
              description="libuv handles on relayd's loop, and per bridge or visitor: "
                          "handles growing while bridges do not is a leak."),
        panel("Accept errors",
              [q(f"sum by (machine_id, job, error) "
                 f"(rate(opentunnel_accept_errors_total{{{SEL}}}[{RATE}]))",
                 "{{machine_id}} {{job}} {{error}}")], unit="ops",
              description="emfile: out of descriptors (or memory)."),
        panel("Uptime",
              [q(f"opentunnel_uptime_seconds{{{SEL}}}", "{{machine_id}} {{job}}")], unit="s"),
        panel("Control sessions opened (per hour)",
              [q(hourly("opentunnel_control_sessions_total", "machine_id"), "{{machine_id}}")],
              description="relayd's sessions with controld: more than one an hour means "
                          "controld restarts or the session breaks."),
    ]),
    ("Mesh", [
        panel("Peers by state",
              [q(f"sum by (machine_id, state) (opentunnel_mesh_peers{{{SEL}}})",
                 "{{machine_id}} {{state}}")],
              description="Every machine should have every other one up."),
        panel("Links up and down (per hour)",
              [q(hourly("opentunnel_mesh_links_total", "machine_id, event"),
                 "{{machine_id}} {{event}}")]),
        panel("Table: bridges per holding machine",
              [q(f"opentunnel_mesh_table_bridges{{{SEL}}}", "{{machine_id}} sees {{machine}}")],
              description="Each machine's view of the bridges each machine holds: the lines "
                          "for one holder should lie on each other."),
        panel("Own and others' bridges",
              [q(f"sum by (machine_id) (opentunnel_mesh_local_bridges{{{SEL}}})",
                 "{{machine_id}} own"),
               q(f"sum by (machine_id) (opentunnel_mesh_table_entries{{{SEL}}})",
                 "{{machine_id}} others'"),
               q(f"sum by (machine_id) (opentunnel_mesh_table_routes{{{SEL}}})",
                 "{{machine_id}} relayd's routes")]),
        panel("Propagation",
              [q(quantile(0.5, "opentunnel_mesh_propagation_seconds", "kind"), "p50 {{kind}}"),
               q(quantile(0.99, "opentunnel_mesh_propagation_seconds", "kind"),
                 "p99 {{kind}}")], unit="s",
              description="From a peer announcing a change to this machine applying it, "
                          "across the two clocks."),
        panel("Snapshot duration",
              [q(quantile(0.5, "opentunnel_mesh_snapshot_duration_seconds", ""), "p50"),
               q(quantile(0.99, "opentunnel_mesh_snapshot_duration_seconds", ""), "p99")],
              unit="s", description="Snapshots received when links come up: from the peer "
                                    "taking one to applying it here."),
        panel("Snapshot size",
              [q(quantile(0.5, "opentunnel_mesh_snapshot_bridges", ""), "p50 bridges"),
               q(quantile(0.99, "opentunnel_mesh_snapshot_bridges", ""), "p99 bridges")]),
        panel("Forwards",
              [q(rate("opentunnel_visitor_connections_total", "outcome",
                      'outcome=~"forwarded_.*"'), "{{outcome}}"),
               q(rate("opentunnel_cluster_forward_failures_total", "reason"),
                 "failed {{reason}}"),
               q(rate("opentunnel_mesh_lookups_total", "result"), "lookup {{result}}")],
              unit="ops"),
        panel("Route checks",
              [q(rate("opentunnel_mesh_route_checks_total", "side, result"),
                 "{{side}} {{result}}")], unit="ops"),
        panel("Link errors, alive checks and dropped machines",
              [q(rate("opentunnel_mesh_link_errors_total", "reason"), "link error {{reason}}"),
               q(rate("opentunnel_mesh_alive_checks_total", "result"), "alive check {{result}}"),
               q(rate("opentunnel_mesh_machines_dropped_total", "reason"),
                 "dropped {{reason}}")], unit="ops",
              description="Alive checks ask a held machine (its controld restarting) whether "
                          "its relayd still serves."),
        panel("Held machines and deferred links",
              [q(f"sum by (machine_id) (opentunnel_mesh_held_machines{{{SEL}}})",
                 "{{machine_id}} held"),
               q(hourly("opentunnel_mesh_links_deferred_total", "machine_id"),
                 "{{machine_id}} deferred (per hour)")]),
        panel("Frames",
              [q(rate("opentunnel_mesh_frames_total", "direction, type"),
                 "{{direction}} {{type}}")], unit="ops"),
        panel("Internal listener and relayd's table",
              [q(rate("opentunnel_mesh_internal_connections_total", "kind"), "{{kind}}"),
               q(rate("opentunnel_mesh_internal_refused_total", "reason"), "refused {{reason}}"),
               q(rate("opentunnel_mesh_handoffs_total", "result"), "handoff {{result}}"),
               q(rate("opentunnel_mesh_table_updates_total", "kind"), "table {{kind}}")],
              unit="ops"),
    ]),
]


def field_config(spec):
    defaults = {"unit": spec["unit"], "color": {"mode": "palette-classic"},
                "thresholds": {"mode": "absolute",
                               "steps": [{"color": "green", "value": None}]}}
    if spec["kind"] == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line", "lineWidth": 1, "fillOpacity": 20 if spec["stack"] else 0,
            "showPoints": "never", "spanNulls": False, "axisPlacement": "auto",
            "stacking": {"mode": "normal" if spec["stack"] else "none", "group": "A"}}
    return {"defaults": defaults, "overrides": []}


def options(spec):
    if spec["kind"] == "stat":
        return {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "colorMode": "value", "graphMode": "area", "justifyMode": "auto",
                "orientation": "auto", "textMode": "auto"}
    return {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"}}


def build():
    panels = []
    next_id = 1
    y = 0
    for title, specs in ROWS:
        panels.append({"type": "row", "title": title, "id": next_id, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        next_id += 1
        y += 1
        x = 0
        height = 4 if all(s["kind"] == "stat" for s in specs) else 8
        for spec in specs:
            if x + spec["width"] > 24:
                x = 0
                y += height
            targets = []
            for index, query in enumerate(spec["queries"]):
                targets.append({"datasource": DS, "refId": chr(ord("A") + index),
                                "expr": query["expr"], "legendFormat": query["legend"],
                                "range": True, "editorMode": "code"})
            panels.append({"type": spec["kind"], "title": spec["title"], "id": next_id,
                           "description": spec["description"], "datasource": DS,
                           "gridPos": {"h": height, "w": spec["width"], "x": x, "y": y},
                           "fieldConfig": field_config(spec), "options": options(spec),
                           "targets": targets})
            next_id += 1
            x += spec["width"]
        y += height

    def query_variable(name, label, query):
        return {"type": "query", "name": name, "label": label, "datasource": DS,
                "definition": query, "query": {"query": query, "refId": f"{name}-query"},
                "refresh": 2, "multi": True, "includeAll": True, "allValue": ".*",
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "sort": 1, "hide": 0, "options": [], "regex": ""}

    templating = [
        {"type": "datasource", "name": "datasource", "label": "Prometheus", "query": "prometheus",
         "current": {}, "hide": 0, "options": [], "refresh": 1, "regex": ""},
        query_variable("region", "Region", "label_values(opentunnel_uptime_seconds, region)"),
        query_variable("machine", "Machine",
                       'label_values(opentunnel_uptime_seconds{region=~"$region"}, machine_id)'),
    ]
    return {
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "description": "OpenTunnel: relayd and controld on every machine (docs/operations.md).",
        "editable": True, "fiscalYearStartMonth": 0, "graphTooltip": 1, "id": None,
        "links": [], "liveNow": False, "panels": panels, "refresh": "30s",
        "schemaVersion": 38, "style": "dark", "tags": ["opentunnel"],
        "templating": {"list": templating},
        "time": {"from": "now-6h", "to": "now"}, "timepicker": {}, "timezone": "",
        "title": "OpenTunnel", "uid": "opentunnel", "version": 1, "weekStart": "",
    }


def render():
    return json.dumps(build(), indent=2) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if OUT.read_text() == render() else 1)
    OUT.write_text(render())
