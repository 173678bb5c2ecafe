"""Hardening: per-source limits on authentication, against real controld and relayd, with the
hostile client of attacks_auth.py.

- The create-tunnel rate limit counts the client's address (not its endpoint) through relayd:
  new source ports get no new budget, and rate_limits gets one row per address.
- controld ignores (counts, logs) a client address that is not an address.
- Wrong-token attaches and wrong bearer tokens: counted per source, logged at a bounded rate,
  and past AUTH_FAILURE_LIMIT refused (too_many_failures / 429) while other addresses go on.
- Bridges per tunnel are bounded (MAX_BRIDGES_PER_TUNNEL), and otunnel backs off on the refusal.
"""
import re

import attacks_auth as attack
import bridge_client as bc
import harness


def _controld_metrics_env():
    port = harness.free_port()
    return port, {"METRICS_LISTEN": f"127.0.0.1:{port}"}


# ---------------------------------------------------------------------------------------------
# Item 1: the create limit through relayd

def test_create_limit_counts_the_address_through_relayd_not_each_source_port(stack):
    s = stack(controld_env={"CREATE_RATE_BURST": "3", "CREATE_RATE_PER_HOUR": "1"})
    statuses = attack.create_from_many_ports(s.relayd, 8)
    assert statuses[:3] == [201, 201, 201], statuses
    assert statuses[3:] == [429] * 5, statuses
    limited = attack.api_request(s.relayd, "POST", "/api/tunnel")
    assert limited.status == 429
    assert limited.json()["_tag"] == "RateLimitedError"
    assert int(limited.headers["retry-after"]) > 0
    # Another address has its own budget.
    assert attack.create_from_many_ports(s.relayd, 1, source=attack.BYSTANDER) == [201]
    keys = [k for k in attack.rate_limit_keys(s.controld) if k.startswith("create:")]
    assert keys == ["create:127.0.0.1", "create:127.0.0.2"], keys


def test_controld_does_not_key_on_a_client_address_that_is_not_an_address(controld):
    port, env = _controld_metrics_env()
    c = controld(env={"CREATE_RATE_BURST": "1", "CREATE_RATE_PER_HOUR": "1", **env})
    # An endpoint per request, as relayd used to send: no fresh budget per port.
    first = c.request("POST", "/api/tunnel", unix=True,
                      headers={"X-OpenTunnel-Client-Address": "203.0.113.7:40001"})
    second = c.request("POST", "/api/tunnel", unix=True,
                       headers={"X-OpenTunnel-Client-Address": "203.0.113.7:40002"})
    third = c.request("POST", "/api/tunnel", unix=True,
                      headers={"X-OpenTunnel-Client-Address": "junk"})
    assert (first.status, second.status, third.status) == (201, 429, 429)
    # A real address still has its own budget.
    assert c.request("POST", "/api/tunnel", unix=True,
                     headers={"X-OpenTunnel-Client-Address": "203.0.113.7"}).status == 201
    metrics = attack.controld_metrics(port)
    assert metrics.get("opentunnel_api_client_address_invalid_total") == 3
    logged = [line for line in c.log_lines()
              if "client address is not an IP address" in str(line)]
    assert len(logged) == 1, logged  # one line a minute, the rest counted as suppressed


# ---------------------------------------------------------------------------------------------
# Item 8: failed attaches

def _attach_log_lines(relayd):
    return [line for line in relayd.log_text().splitlines()
            if "attach failed: bad token" in line or "source refused" in line
            or "refusing attaches" in line]


def test_wrong_token_attaches_are_counted_logged_and_the_source_refused(stack):
    s = stack(relayd_env={"AUTH_FAILURE_LIMIT": "5"})
    tunnel = bc.create_ready_tunnel(s.relayd, s.workdir)
    codes = attack.wrong_token_attaches(s.relayd, tunnel["id"], 40)
    assert codes[:5] == ["bad_token"] * 5, codes
    assert codes[5:] == ["too_many_failures"] * 35, codes
    metrics = s.relayd.metrics()
    assert metrics.attaches("bad_token") == 5
    assert metrics.attaches("too_many_failures") == 35
    # Logged at a bounded rate: the first failure, the one that starts refusing, the first
    # refusal; the other 37 are counted in `suppressed`.
    lines = _attach_log_lines(s.relayd)
    assert 1 <= len(lines) <= 3, lines
    assert "127.0.0.1" in lines[0]

    # The refusal says why and closes with 1008; the right token from the same address waits
    # out the window too (we cannot tell the owner from the guesser).
    answer, client = attack.attach_from(s.relayd, tunnel["id"], tunnel["token"])
    assert answer["type"] == "attach_error" and answer["code"] == "too_many_failures", answer
    assert "retry in" in answer["message"]
    assert client.wait_close()[0] == 1008
    client.close()

    # Another address is unaffected, right token or wrong.
    answer, client = attack.attach_from(s.relayd, tunnel["id"], tunnel["token"], attack.BYSTANDER)
    assert answer["type"] == "attached", answer
    client.close()
    assert attack.wrong_token_attaches(s.relayd, tunnel["id"], 1,
                                       source=attack.BYSTANDER) == ["bad_token"]


def test_wrong_bearer_tokens_through_relayd_get_429_and_others_are_unaffected(stack):
    port, env = _controld_metrics_env()
    s = stack(controld_env={"AUTH_FAILURE_LIMIT": "5", **env})
    tunnel = bc.create_ready_tunnel(s.relayd, s.workdir)
    statuses = attack.wrong_token_api_calls(s.relayd, tunnel["id"], 30)
    assert statuses[:5] == [401] * 5, statuses
    assert statuses[5:] == [429] * 25, statuses
    refused = attack.api_request(s.relayd, "GET", f"/api/tunnel/{tunnel['id']}",
                                 token=tunnel["token"])
    assert refused.status == 429  # right token, penalized address: refused until the window ends
    assert refused.json()["_tag"] == "RateLimitedError"
    assert 0 < int(refused.headers["retry-after"]) <= 60
    # Requests without credentials are not refused by it.
    assert attack.api_request(s.relayd, "GET", "/openapi.json").status == 200
    # Another address: the right token works, a wrong one is an ordinary 401.
    assert attack.api_request(s.relayd, "GET", f"/api/tunnel/{tunnel['id']}",
                              source=attack.BYSTANDER, token=tunnel["token"]).status == 200
    assert attack.wrong_token_api_calls(s.relayd, tunnel["id"], 1,
                                        source=attack.BYSTANDER) == [401]
    metrics = attack.controld_metrics(port)
    assert metrics.get("opentunnel_auth_failures_total", kind="api") == 6
    assert metrics.get("opentunnel_requests_limited_total", limit="auth_failures") == 26
    lines = [line for line in s.controld.log_path.read_text().splitlines()
             if "authentication fail" in line or "refusing credentials" in line]
    # 127.0.0.1: first failure, the one that starts refusing, first refusal; 127.0.0.2: one.
    assert 2 <= len(lines) <= 4, lines


# ---------------------------------------------------------------------------------------------
# Item 8: bridges per tunnel

def test_bridges_per_tunnel_are_bounded(stack):
    s = stack(relayd_env={"MAX_BRIDGES_PER_TUNNEL": "3"})
    tunnel = bc.create_ready_tunnel(s.relayd, s.workdir)
    answers, clients = attack.many_bridges(s.relayd, tunnel, 6)
    try:
        assert [a.get("type") for a in answers[:3]] == ["attached"] * 3, answers
        assert [a.get("code") for a in answers[3:]] == ["too_many_bridges"] * 3, answers
        assert s.relayd.metrics().attaches("too_many_bridges") == 3
        # One leaves: the next one fits again.
        clients[0].close()
        s.relayd.wait_metric(lambda m: m.get("opentunnel_bridges_attached") == 2,
                             what="a bridge to detach")
        answer, client = attack.attach_from(s.relayd, tunnel["id"], tunnel["token"])
        clients.append(client)
        assert answer["type"] == "attached", answer
    finally:
        attack.close_all(clients)


def test_otunnel_backs_off_when_the_tunnel_has_its_most_bridges(stack, origin):
    s = stack(relayd_env={"MAX_BRIDGES_PER_TUNNEL": "1"})
    web = origin("web")
    client = s.tunnel(web.port, links=2, wait=False)
    client.wait_url()

    def waits():
        """The waits otunnel reported after each too_many_bridges, in seconds."""
        return [float(m.group(1)) for m in re.finditer(
            r"reconnecting in ([0-9.]+) s: attach_error too_many_bridges", client.stderr_text())]

    # The refused link keeps its backoff (docs/protocol.md section 10): it does not reset, so
    # the waits grow (with jitter, each wait is longer than the one two before it).
    harness.wait_until(lambda: len(waits()) >= 5, 60, "otunnel to be refused five times")
    seen = waits()
    assert all(seen[i + 2] > seen[i] for i in range(len(seen) - 2)), seen
    # No hot loop: every refusal the relay counted is one otunnel waited after (one may be on
    # its way).
    refusals = s.relayd.metrics().attaches("too_many_bridges")
    assert len(seen) <= refusals <= len(waits()) + 1, (refusals, waits())
    assert s.relayd.metrics().get("opentunnel_bridges_attached") == 1
