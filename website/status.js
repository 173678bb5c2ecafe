// The status page: a tunnel's state, links, certificate and traffic, read from this site's own
// API with the token the visitor pasted. The token is kept in this browser only (sessionStorage,
// or localStorage when "Remember" is ticked) and sent only to this origin, as a bearer header.
// No framework and nothing from elsewhere: the page's Content-Security-Policy allows scripts and
// requests to this origin only. The graph is an SVG drawn here.
"use strict";

const STORE_KEY = "opentunnel.status";
const REFRESH_MS = 30000;
const SVG = "http://www.w3.org/2000/svg";

const $ = (id) => document.getElementById(id);
const state = { id: "", token: "", period: "24h", timer: null, loading: false, again: false };

// ---- Storage: the token never leaves the browser but to our API ----

function loadSaved() {
  for (const storage of [localStorage, sessionStorage]) {
    try {
      const saved = JSON.parse(storage.getItem(STORE_KEY) || "null");
      if (saved && saved.id && saved.token) {
        return { ...saved, remembered: storage === localStorage };
      }
    } catch (error) {
      storage.removeItem(STORE_KEY);
    }
  }
  return null;
}

function save(id, token, remember) {
  forgetStored();
  (remember ? localStorage : sessionStorage).setItem(STORE_KEY, JSON.stringify({ id, token }));
}

function forgetStored() {
  localStorage.removeItem(STORE_KEY);
  sessionStorage.removeItem(STORE_KEY);
}

// ---- The API ----

class ApiError extends Error {
  constructor(status, tag, message, retryAfter) {
    super(message);
    this.status = status;
    this.tag = tag;
    this.retryAfter = retryAfter;
  }
}

async function api(path) {
  let response;
  try {
    response = await fetch(path, {
      headers: { Authorization: "Bearer " + state.token, Accept: "application/json" },
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    });
  } catch (error) {
    throw new ApiError(0, "NetworkError", "The service could not be reached.");
  }
  let body = null;
  try {
    body = await response.json();
  } catch (error) {
    body = null;
  }
  if (!response.ok) {
    throw new ApiError(response.status, body && body._tag, (body && body.message) || response.statusText,
                       response.headers.get("Retry-After"));
  }
  return body;
}

function explain(error) {
  switch (error.status) {
    case 401:
      return "This token is not the tunnel's token. Copy it again from otunnel's state file.";
    case 404:
      return "There is no tunnel with this ID (it was never created, or it was deleted).";
    case 429:
      return "Too many attempts with a wrong token from your address. Try again in " +
             (error.retryAfter || "a few") + " seconds.";
    case 503:
      return "The service is busy or its storage is unavailable. Try again shortly.";
    case 0:
      return error.message;
    default:
      return "The service answered " + error.status + ": " + error.message;
  }
}

// ---- Formatting ----

function formatBytes(bytes) {
  const units = ["B", "kB", "MB", "GB", "TB", "PB"];
  let value = Number(bytes);
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  const digits = unit === 0 || value >= 10 ? 0 : 1;
  return value.toFixed(digits) + " " + units[unit];
}

function formatTime(text) {
  if (!text) return "never";
  const date = new Date(text);
  return date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

function relativeDays(text) {
  const days = Math.round((new Date(text).getTime() - Date.now()) / 86400000);
  if (days > 1) return "in " + days + " days";
  if (days === 1) return "tomorrow";
  if (days === 0) return "today";
  return -days + " days ago";
}

function setBadge(element, text, kind) {
  element.textContent = text;
  element.className = "badge badge-" + kind;
}

function showMessage(text, kind) {
  const message = $("message");
  message.textContent = text;
  message.className = "message message-" + (kind || "error");
  message.hidden = !text;
}

// ---- The certificate's names, from the leaf's subjectAltName (DER read by hand) ----

function derAt(bytes, pos) {
  const tag = bytes[pos];
  let length = bytes[pos + 1];
  let header = 2;
  if (length & 0x80) {
    const count = length & 0x7f;
    length = 0;
    for (let i = 0; i < count; i += 1) length = length * 256 + bytes[pos + 2 + i];
    header += count;
  }
  return { tag, start: pos + header, end: pos + header + length };
}

function certificateNames(chainPem) {
  const match = /-----BEGIN CERTIFICATE-----([^-]+)-----END CERTIFICATE-----/.exec(chainPem || "");
  if (!match) return [];
  let bytes;
  try {
    bytes = Uint8Array.from(atob(match[1].replace(/\s+/g, "")), (c) => c.charCodeAt(0));
  } catch (error) {
    return [];
  }
  const oid = [0x06, 0x03, 0x55, 0x1d, 0x11];  // subjectAltName
  for (let i = 0; i + oid.length < bytes.length; i += 1) {
    if (!oid.every((b, k) => bytes[i + k] === b)) continue;
    let value = derAt(bytes, i + oid.length);
    if (value.tag === 0x01) value = derAt(bytes, value.end);  // "critical"
    if (value.tag !== 0x04) return [];
    const sequence = derAt(bytes, value.start);
    const names = [];
    for (let p = sequence.start; p < sequence.end && p < bytes.length;) {
      const entry = derAt(bytes, p);
      if (entry.tag === 0x82) names.push(String.fromCharCode(...bytes.slice(entry.start, entry.end)));
      p = entry.end;
    }
    return names;
  }
  return [];
}

// ---- The graph ----

// The smallest 1, 2, 2.5 or 5 times a power of ten that is at least `value`, so the axis's
// labels are round numbers.
function niceStep(value) {
  if (value <= 0) return 250;
  const power = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (step * power >= value) return step * power;
  }
  return 10 * power;
}

function svgElement(name, attributes, parent) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, value);
  if (parent) parent.appendChild(element);
  return element;
}

function bucketLabel(start, period) {
  const date = new Date(start);
  if (period === "24h") {
    return date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  }
  return date.toLocaleDateString(undefined, { month: "short", day: "numeric", timeZone: "UTC" });
}

function drawGraph(usage) {
  const width = 720;
  const height = 260;
  const margin = { left: 70, right: 24, top: 12, bottom: 30 };
  const plotWidth = width - margin.left - margin.right;
  const plotHeight = height - margin.top - margin.bottom;
  const buckets = usage.buckets;
  const peak = Math.max(0, ...buckets.map((b) => Math.max(b.bytesIn, b.bytesOut)));
  const ticks = 4;
  const top = niceStep(peak / ticks) * ticks;

  const svg = svgElement("svg", {
    id: "usage-svg",
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": `Traffic over ${usage.period}: ${formatBytes(usage.total.bytesIn)} in, ` +
                  `${formatBytes(usage.total.bytesOut)} out`,
    "data-period": usage.period,
    "data-total-in": usage.total.bytesIn,
    "data-total-out": usage.total.bytesOut,
  });

  for (let i = 0; i <= ticks; i += 1) {
    const y = margin.top + plotHeight - (plotHeight * i) / ticks;
    svgElement("line", { class: "grid", x1: margin.left, x2: width - margin.right, y1: y, y2: y }, svg);
    const label = svgElement("text", { class: "axis", x: margin.left - 8, y: y + 4, "text-anchor": "end" }, svg);
    label.textContent = formatBytes((top * i) / ticks);
  }

  const slot = plotWidth / buckets.length;
  const barWidth = Math.max(1, (slot * 0.8) / 2);
  const labelEvery = usage.period === "24h" ? 3 : 5;
  const heightOf = (bytes) => (bytes > 0 ? Math.max(1.5, (plotHeight * bytes) / top) : 0);
  buckets.forEach((bucket, index) => {
    const x = margin.left + index * slot + slot * 0.1;
    const group = svgElement("g", {
      class: "bucket",
      "data-start": bucket.start,
      "data-in": bucket.bytesIn,
      "data-out": bucket.bytesOut,
      "data-connections": bucket.connections,
    }, svg);
    const title = svgElement("title", {}, group);
    title.textContent = `${bucketLabel(bucket.start, usage.period)}: ${formatBytes(bucket.bytesIn)} in, ` +
                        `${formatBytes(bucket.bytesOut)} out, ${bucket.connections} connections`;
    const inHeight = heightOf(bucket.bytesIn);
    const outHeight = heightOf(bucket.bytesOut);
    svgElement("rect", { class: "bar-in", x, width: barWidth, y: margin.top + plotHeight - inHeight,
                         height: inHeight }, group);
    svgElement("rect", { class: "bar-out", x: x + barWidth, width: barWidth,
                         y: margin.top + plotHeight - outHeight, height: outHeight }, group);
    if ((buckets.length - 1 - index) % labelEvery === 0) {
      const label = svgElement("text", { class: "axis", x: x + barWidth, y: height - 10,
                                         "text-anchor": "middle" }, svg);
      label.textContent = bucketLabel(bucket.start, usage.period);
    }
  });
  svgElement("line", { class: "baseline", x1: margin.left, x2: width - margin.right,
                       y1: margin.top + plotHeight, y2: margin.top + plotHeight }, svg);
  if (peak === 0) {
    const empty = svgElement("text", { class: "empty", x: margin.left + plotWidth / 2,
                                       y: margin.top + plotHeight / 2, "text-anchor": "middle" }, svg);
    empty.textContent = "No traffic in this period yet";
  }
  const graph = $("graph");
  graph.replaceChildren(svg);
  graph.dataset.ready = "true";
  $("total-in").textContent = formatBytes(usage.total.bytesIn);
  $("total-out").textContent = formatBytes(usage.total.bytesOut);
  $("total-connections").textContent = usage.total.connections + " connections";
}

// ---- Rendering ----

function renderTunnel(tunnel) {
  setBadge($("state"), tunnel.state, tunnel.state === "online" ? "good" : "idle");
  const url = $("url");
  const port = location.port ? ":" + location.port : "";
  url.href = "https://" + tunnel.hostname + port + "/";
  url.textContent = tunnel.hostname + port;
  $("links").textContent = tunnel.bridges === 1 ? "1 bridge attached" : tunnel.bridges + " bridges attached";
  $("created").textContent = formatTime(tunnel.createdAt);
  $("last-connected").textContent = formatTime(tunnel.lastConnectedAt);
}

function renderCertificate(certificate, hostname) {
  const kinds = { ready: "good", issuing: "busy", failed: "bad", none: "idle" };
  setBadge($("cert-state"), certificate.state, kinds[certificate.state] || "idle");
  $("cert-not-after").textContent = certificate.notAfter
    ? formatTime(certificate.notAfter) + " (" + relativeDays(certificate.notAfter) + ")"
    : "not issued yet";
  const names = certificateNames(certificate.chain);
  $("cert-names").textContent = names.length ? names.join(", ") : hostname;
  const hasError = Boolean(certificate.error);
  $("cert-error").hidden = !hasError;
  $("cert-error-label").hidden = !hasError;
  $("cert-error").textContent = certificate.error || "";
}

async function refresh() {
  if (!state.id || !state.token) return;
  if (state.loading) {
    state.again = true;  // the tunnel or the period changed meanwhile: read once more after
    return;
  }
  state.loading = true;
  $("show").disabled = true;
  const base = "/api/tunnel/" + encodeURIComponent(state.id);
  try {
    // The tunnel first: a wrong token then costs one failed authentication, not three (the
    // service refuses an address's credentials for a while after 20 of them).
    const tunnel = await api(base);
    const [certificate, usage] = await Promise.all([
      api(base + "/certificate"),
      api(base + "/usage?period=" + state.period),
    ]);
    renderTunnel(tunnel);
    renderCertificate(certificate, tunnel.hostname);
    drawGraph(usage);
    $("result").hidden = false;
    showMessage("");
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    showMessage(explain(error));
    if (error.status === 401 || error.status === 404) {
      $("result").hidden = true;
      stopRefreshing();
    }
  } finally {
    state.loading = false;
    $("show").disabled = false;
  }
  if (state.again) {
    state.again = false;
    refresh();
  }
}

function stopRefreshing() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}

function startRefreshing() {
  stopRefreshing();
  state.timer = setInterval(() => {
    if (!document.hidden) refresh();
  }, REFRESH_MS);
}

function show(id, token) {
  state.id = id;
  state.token = token;
  $("graph").dataset.ready = "false";
  refresh();
  startRefreshing();
}

// ---- Wiring ----

document.addEventListener("DOMContentLoaded", () => {
  const form = $("lookup");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const id = $("tunnel-id").value.trim().toLowerCase();
    const token = $("tunnel-token").value.trim();
    if (!id || !token) return;
    save(id, token, $("remember").checked);
    show(id, token);
  });
  $("forget").addEventListener("click", () => {
    forgetStored();
    stopRefreshing();
    state.id = state.token = "";
    form.reset();
    $("result").hidden = true;
    showMessage("Forgotten: nothing of this tunnel is kept in this browser any more.", "info");
  });
  for (const button of document.querySelectorAll("[data-period]")) {
    button.addEventListener("click", () => {
      state.period = button.dataset.period;
      for (const other of document.querySelectorAll("[data-period]")) {
        other.setAttribute("aria-pressed", String(other === button));
      }
      $("graph").dataset.ready = "false";
      refresh();
    });
  }
  const saved = loadSaved();
  if (saved) {
    $("tunnel-id").value = saved.id;
    $("tunnel-token").value = saved.token;
    $("remember").checked = saved.remembered;
    show(saved.id, saved.token);
  }
});
