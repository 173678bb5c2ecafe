"""relayd's GET /health on HTTP_LISTEN means "send traffic here" (docs/relayd.md, Health): 503
"starting" until its first control session, 200 "ok" with controld behind it and through a short
controld outage (CONTROL_DOWN_GRACE_MS), 503 "control_down" past that grace, 200 again once the
session is back, and 503 "draining" from SIGTERM on. The JSON body names the state."""
import http.client
import json
import signal

import pytest

import harness
import relay_harness as rh

GRACE_MS = 3000


def health(relay):
    connection = http.client.HTTPConnection("127.0.0.1", relay.http_port, timeout=10)
    try:
        connection.request("GET", "/health")
        response = connection.getresponse()
        body = json.loads(response.read())
        assert response.getheader("Content-Type") == "application/json"
        return response.status, body
    finally:
        connection.close()


def wait_health(relay, status, state, timeout=30.0):
    def check():
        answer = health(relay)
        return answer if answer[0] == status and answer[1]["status"] == state else None
    return harness.wait_until(check, timeout, f"/health to say {status} {state}")


@pytest.mark.waits
def test_health_follows_startup_control_session_and_drain(tmp_path):
    controld = harness.Controld(tmp_path / "controld", name="controld",
                                env={"OPENTUNNEL_DOMAIN": rh.DOMAIN})
    relay = rh.Relayd(tmp_path / "relayd", controld, name="relayd",
                      env={"CONTROL_DOWN_GRACE_MS": str(GRACE_MS), "SHUTDOWN_DRAIN_MS": "4000",
                           "REGION": "test-region"})
    try:
        # relayd first: it listens, but without controld it has nothing to serve.
        relay.start(wait=False)
        harness.wait_until(lambda: "serving tls_port=" in relay.log_text(), 30, "relayd to listen")
        relay.http_port = int(relay.log_text().split("http_port=")[1].split()[0])
        status, body = health(relay)
        assert (status, body["status"], body["control"]) == (503, "starting", "down"), body
        assert body["machine"] == "relayd" and body["region"] == "test-region"

        controld.start()
        relay.wait_ready()
        status, body = health(relay)
        assert (status, body["status"], body["control"]) == (200, "ok", "up"), body

        # controld goes away: within the grace relayd still takes traffic (its bridges and
        # cached tunnels keep working), past it /health says control_down.
        controld.stop(signal.SIGKILL)
        answers = []

        def past_grace():
            answers.append(health(relay))
            return answers[-1][0] == 503
        harness.wait_until(past_grace, 30, "/health to turn 503 after controld went")
        down = [(s, b) for s, b in answers if b["control"] == "down"]
        assert down, answers
        for status, body in down[:-1]:
            assert (status, body["status"]) == (200, "ok"), answers
            assert body["control_down_ms"] < GRACE_MS, answers
        status, body = down[-1]
        assert body["status"] == "control_down", body
        assert body["control_down_ms"] >= GRACE_MS, body
        # At least one answer inside the grace (the first polls follow the kill at once).
        assert any(s == 200 for s, _ in down), answers

        controld.start()
        wait_health(relay, 200, "ok")

        relay.process.send_signal(signal.SIGTERM)
        status, body = wait_health(relay, 503, "draining", timeout=10)
        assert body["control"] == "up", body
        assert relay.process.wait(30) == 0
    finally:
        relay.stop()
        controld.stop()
