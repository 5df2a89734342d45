#!/usr/bin/env python3
# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Turn the rollouts a run wrote to trainer.rollout_data_dir into one self-contained HTML page.

python scripts/rollout_viewer.py ROLLOUT_DIR [-o page.html]     (default: ROLLOUT_DIR/index.html)
python scripts/rollout_viewer.py episodes.jsonl                 (`python -m verl.envs.evaluate --output`'s file)

The page embeds the data and the images (no server, no network): page through the steps, see each prompt with its
images beside its responses sorted by reward, filter by reward or text, and follow the mean reward (and accuracy,
when the reward function returns an accuracy key) over the steps. A multi-turn episode shows as a conversation:
each turn with its role, tool calls and images. Standard library only.
"""

import argparse
import base64
import glob
import json
import mimetypes
import os
import re
import sys


STEP_FILE = re.compile(r"step_(\d+)\.jsonl$")


def step_files(rollout_dir: str) -> list[str]:
    """The step_*.jsonl files in the folder `rollout_dir`, whose name is taken as it is (a run named `exp[1]` or
    `lr*2`: as a glob pattern it matched another folder's files, or none)."""
    return glob.glob(os.path.join(glob.escape(rollout_dir), "step_*.jsonl"))


def read_records(rollout_dir: str) -> list[dict]:
    """Every sample of every step_N.jsonl under `rollout_dir`, in step order; or every record of one JSONL file
    (step 0 unless a record has its own)."""
    if not os.path.exists(rollout_dir):
        raise FileNotFoundError(f"'{rollout_dir}' does not exist; give a rollout folder or an episodes JSONL file.")
    files = []
    if os.path.isfile(rollout_dir):
        match = STEP_FILE.search(os.path.basename(rollout_dir))
        files.append((int(match.group(1)) if match else 0, rollout_dir))
    for path in step_files(rollout_dir):
        match = STEP_FILE.search(os.path.basename(path))
        if match:
            files.append((int(match.group(1)), path))
    if not files:
        raise FileNotFoundError(
            f"'{rollout_dir}' holds no step_N.jsonl files; train with trainer.rollout_data_dir={rollout_dir}."
        )
    records = []
    for step, path in sorted(files):
        try:
            with open(path, encoding="utf-8") as f:
                lines = list(f)
        except UnicodeDecodeError as err:
            raise ValueError(f"'{path}' is not UTF-8 text ({err.reason} at byte {err.start}).") from None
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line, parse_constant=lambda _: None)  # NaN/Infinity: no value
            except json.JSONDecodeError as err:
                raise ValueError(f"'{path}' line {number} is not JSON ({err.msg}); the file is damaged.") from None
            problem = record_problem(record)
            if problem:
                raise ValueError(f"'{path}' line {number} is no rollout record: {problem}.")
            record.setdefault("step", step)
            records.append(record)
    if not records:
        raise ValueError(f"'{rollout_dir}' holds no records (its step files are empty).")
    return records


SHOWN_FIELDS = ("prompt", "response", "messages")
"""What the page shows of a record; one without any of them is some other file's line."""


def record_problem(record: object) -> str | None:
    """Why a parsed line is not a record the page can show (a JSON object, an integer step, messages as objects,
    images as lists of paths)."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    if "step" in record and (not isinstance(record["step"], int) or isinstance(record["step"], bool)):
        return f"its step is {record['step']!r}, not an integer"
    messages = record.get("messages")
    if messages is not None and not (isinstance(messages, list) and all(isinstance(m, dict) for m in messages)):
        return "its messages are not a list of objects"
    for holder in (record, *(messages or [])):
        images = holder.get("images")
        if images is not None and not (isinstance(images, list) and all(isinstance(p, str) for p in images)):
            return f"its images are {json.dumps(images)[:80]}, not a list of paths"
    if not any(key in record for key in SHOWN_FIELDS):  # another JSONL file: shown as one empty response
        return f"it has none of {', '.join(SHOWN_FIELDS)} (its keys: {', '.join(list(record)[:8]) or 'none'})"
    return None


def image_paths(record: dict) -> list[str]:
    """The images a record names: its own and its messages' (relative paths)."""
    paths = list(record.get("images") or [])
    for message in record.get("messages") or []:
        paths += message.get("images") or []
    return paths


def embed_images(rollout_dir: str, records: list[dict]) -> tuple[dict[str, str], list[str]]:
    """({relative path: data URI} for every image the records name, [paths that are missing]); paths are relative
    to `rollout_dir` (a records file's folder)."""
    if os.path.isfile(rollout_dir):
        rollout_dir = os.path.dirname(os.path.abspath(rollout_dir))
    images, missing = {}, []
    for path in sorted({path for record in records for path in image_paths(record)}):
        full = os.path.join(rollout_dir, path)
        if not os.path.isfile(full):
            missing.append(path)
            continue
        mime = mimetypes.guess_type(full)[0] or "image/png"
        with open(full, "rb") as f:
            images[path] = f"data:{mime};base64,{base64.b64encode(f.read()).decode('ascii')}"
    return images, missing


def render_html(records: list[dict], images: dict[str, str], title: str) -> str:
    """The page: the template with the data inlined as JSON (every `<` escaped, so no text can end the script)."""
    data = json.dumps({"title": title, "records": records, "images": images}, ensure_ascii=False, allow_nan=False)
    data = data.replace("<", "\\u003c")
    escaped_title = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return PAGE.replace("__TITLE__", escaped_title).replace("__DATA__", data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rollout_dir", help="the run's trainer.rollout_data_dir, or one records file (.jsonl)")
    parser.add_argument(
        "-o", "--output", help="the HTML file to write (default: ROLLOUT_DIR/index.html, or FILE's name with .html)"
    )
    parser.add_argument("--title", help="page title (default: the directory's name)")
    args = parser.parse_args(argv)
    try:
        records = read_records(args.rollout_dir)
    except (FileNotFoundError, ValueError) as err:
        print(f"rollout_viewer: {err}", file=sys.stderr)
        return 2
    images, missing = embed_images(args.rollout_dir, records)
    for path in missing:
        print(f"rollout_viewer: warning: image '{path}' is missing; the page shows a placeholder.", file=sys.stderr)
    title = args.title or os.path.basename(os.path.normpath(os.path.abspath(args.rollout_dir)))
    if os.path.isfile(args.rollout_dir):
        output = args.output or os.path.splitext(args.rollout_dir)[0] + ".html"
    else:
        output = args.output or os.path.join(args.rollout_dir, "index.html")
    read = [args.rollout_dir] if os.path.isfile(args.rollout_dir) else step_files(args.rollout_dir)
    if os.path.exists(output) and any(os.path.samefile(output, path) for path in read):  # the page replaced them
        print(f"rollout_viewer: {output} is a records file it reads; choose another --output.", file=sys.stderr)
        return 2
    try:
        with open(output, "w", encoding="utf-8") as f:
            f.write(render_html(records, images, title))
    except OSError as err:
        print(
            f"rollout_viewer: cannot write {output}: {err.strerror or err}; choose another --output.", file=sys.stderr
        )
        return 1
    steps = len({record["step"] for record in records})
    print(f"{output}: {len(records)} responses over {steps} steps, {len(images)} images")
    return 0


PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Rollouts: __TITLE__</title>
<style>
  :root { --border: #d0d7de; --muted: #57606a; --bg: #f6f8fa; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328; }
  header { position: sticky; top: 0; z-index: 2; background: #fff; border-bottom: 1px solid var(--border);
           padding: 8px 16px; display: flex; flex-wrap: wrap; gap: 8px 18px; align-items: center; }
  header h1 { font-size: 16px; margin: 0 8px 0 0; }
  header label { color: var(--muted); }
  header input[type=number] { width: 5.5em; }
  header input[type=search] { width: 14em; }
  button, select, input { font: inherit; }
  #shown-count { color: var(--muted); margin-left: auto; }
  main { padding: 12px 16px 40px; }
  #chart-box { display: flex; gap: 16px; align-items: flex-start; margin-bottom: 12px; }
  #chart { border: 1px solid var(--border); border-radius: 6px; background: #fff; }
  #chart .grid { stroke: #eaeef2; }
  #chart .axis-label { font-size: 11px; fill: var(--muted); }
  #chart .series { fill: none; stroke-width: 2; }
  #chart .point { cursor: pointer; }
  #chart .marker { stroke: #8250df; stroke-dasharray: 4 3; }
  .legend { font-size: 12px; color: var(--muted); }
  .legend span { display: inline-block; width: 12px; height: 3px; margin-right: 5px; vertical-align: middle; }
  #step-summary { font-size: 13px; }
  .group { border: 1px solid var(--border); border-radius: 6px; margin: 0 0 12px; display: grid;
           grid-template-columns: minmax(240px, 32%) 1fr; overflow: hidden; }
  .group-side { background: var(--bg); padding: 10px 12px; border-right: 1px solid var(--border); }
  .group-title { font-weight: 600; margin-bottom: 4px; }
  .group-meta { color: var(--muted); font-size: 12px; margin-bottom: 6px; word-break: break-all; }
  pre { white-space: pre-wrap; word-break: break-word; margin: 0; font: 12.5px/1.4 ui-monospace, Menlo, monospace; }
  .prompt { max-height: 16em; overflow: auto; }
  .images { display: flex; flex-wrap: wrap; gap: 6px; margin-top: 8px; }
  .prompt-image { width: 112px; height: auto; image-rendering: pixelated; border: 1px solid var(--border);
                  background: #fff; }
  .missing-image { width: 112px; height: 112px; border: 1px dashed #cf222e; color: #cf222e; font-size: 11px;
                   display: flex; align-items: center; justify-content: center; text-align: center; }
  .responses { padding: 6px 10px; }
  .response { border-left: 4px solid #ccc; padding: 4px 8px; margin: 4px 0; }
  .response + .response { border-top: 1px solid #eaeef2; }
  .response-head { display: flex; flex-wrap: wrap; gap: 4px 12px; font-size: 12px; color: var(--muted); }
  .response-head .reward { font-weight: 600; color: #1f2328; }
  .response-text { max-height: 12em; overflow: auto; margin-top: 2px; }
  .conversation { max-height: 32em; overflow: auto; margin-top: 4px; display: flex; flex-direction: column; gap: 4px; }
  .turn { border: 1px solid #eaeef2; border-radius: 4px; padding: 3px 6px; background: #fff; }
  .turn-assistant { background: #f1f8ff; border-color: #c8e1ff; }
  .turn-tool { background: #fff8e6; border-color: #f1d79b; }
  .turn-system { background: var(--bg); }
  .turn.cut { opacity: 0.55; border-style: dashed; }
  .turn-head { font-size: 11px; font-weight: 600; color: var(--muted); text-transform: uppercase; }
  .turn-head .cut-note { text-transform: none; font-weight: normal; margin-left: 6px; }
  .turn-text { max-height: 12em; overflow: auto; }
  .tool-call { margin: 3px 0 1px; padding: 2px 6px; border-left: 3px solid #8250df; background: #fbf7ff;
               display: flex; gap: 8px; align-items: baseline; }
  .tool-call .tool-name { font-weight: 600; font-family: ui-monospace, Menlo, monospace; font-size: 12.5px; }
  .tool-call-error { border-left-color: #cf222e; background: #fff5f5; color: #cf222e; font-size: 12px; }
  .env-counts { color: var(--muted); }
  .empty { color: var(--muted); padding: 24px; text-align: center; }
</style>
</head>
<body>
<header>
  <h1>Rollouts: __TITLE__</h1>
  <button id="prev-step" title="previous step (left arrow)">&larr; prev</button>
  <select id="step-select" aria-label="step"></select>
  <button id="next-step" title="next step (right arrow)">next &rarr;</button>
  <label>reward &ge; <input id="min-reward" type="number" step="0.1" placeholder="any"></label>
  <label>reward &le; <input id="max-reward" type="number" step="0.1" placeholder="any"></label>
  <label>text <input id="text-filter" type="search" placeholder="in prompt or response"></label>
  <span id="shown-count"></span>
</header>
<main>
  <div id="chart-box">
    <svg id="chart" width="640" height="210" role="img" aria-label="mean reward per step"></svg>
    <div>
      <div class="legend" id="legend"></div>
      <div id="step-summary"></div>
    </div>
  </div>
  <div id="groups"></div>
</main>
<script type="application/json" id="rollout-data">__DATA__</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("rollout-data").textContent);
const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

const byStep = new Map();
for (const record of DATA.records) {
  if (!byStep.has(record.step)) byStep.set(record.step, []);
  byStep.get(record.step).push(record);
}
const steps = [...byStep.keys()].sort((a, b) => a - b);
const scoreKeys = [...new Set(DATA.records.flatMap((r) => Object.keys(r.scores || {})))];
const accuracyKey = scoreKeys.find((k) => k === "accuracy") || scoreKeys.find((k) => /acc/i.test(k)) || null;
let current = steps[0];

function mean(values) {
  const finite = values.filter((v) => typeof v === "number" && isFinite(v));
  return finite.length ? finite.reduce((a, b) => a + b, 0) / finite.length : null;
}
function fmt(value, digits = 3) {
  return typeof value === "number" ? String(+value.toFixed(digits)) : "n/a";
}
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}
function svg(tag, attrs, parent) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  parent.appendChild(node);
  return node;
}

// ------------------------------------------------------------------ the chart: mean reward (and accuracy) per step
const SERIES = [{ name: "reward", label: "mean reward", color: "#0969da", value: (r) => r.reward }];
if (accuracyKey) {
  SERIES.push({ name: "accuracy", label: "mean " + accuracyKey, color: "#1a7f37",
                value: (r) => (r.scores || {})[accuracyKey] });
}
for (const series of SERIES) {
  series.points = steps.map((step) => [step, mean(byStep.get(step).map(series.value))]).filter((p) => p[1] !== null);
}

function drawChart() {
  const chart = $("chart");
  const width = +chart.getAttribute("width"), height = +chart.getAttribute("height");
  const left = 44, right = 12, top = 10, bottom = 26;
  const values = SERIES.flatMap((s) => s.points.map((p) => p[1]));
  let low = Math.min(0, ...values), high = Math.max(...values, 0);
  if (values.every((v) => v >= 0 && v <= 1)) { low = 0; high = 1; }
  if (high === low) high = low + 1;
  const first = steps[0], last = steps[steps.length - 1];
  const x = (step) => left + (last === first ? (width - left - right) / 2
                                              : (step - first) / (last - first) * (width - left - right));
  const y = (v) => top + (1 - (v - low) / (high - low)) * (height - top - bottom);
  for (let i = 0; i <= 4; i++) {
    const v = low + (high - low) * i / 4;
    svg("line", { class: "grid", x1: left, x2: width - right, y1: y(v), y2: y(v) }, chart);
    svg("text", { class: "axis-label", x: left - 6, y: y(v) + 4, "text-anchor": "end" }, chart).textContent = fmt(v, 2);
  }
  const every = Math.max(1, Math.ceil(steps.length / 10));
  steps.forEach((step, i) => {
    if (i % every && i !== steps.length - 1) return;
    svg("text", { class: "axis-label", x: x(step), y: height - 8, "text-anchor": "middle" }, chart).textContent = step;
  });
  svg("line", { id: "chart-marker", class: "marker", x1: x(current), x2: x(current), y1: top,
                y2: height - bottom }, chart);
  for (const series of SERIES) {
    const d = series.points.map((p, i) => (i ? "L" : "M") + x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
    svg("path", { class: "series series-" + series.name, d, stroke: series.color }, chart);
    for (const [step, value] of series.points) {
      const point = svg("circle", { class: "point point-" + series.name, cx: x(step), cy: y(value), r: 3.5,
                                    fill: series.color, "data-step": step }, chart);
      svg("title", {}, point).textContent = "step " + step + ": " + series.label + " " + fmt(value);
      point.addEventListener("click", () => selectStep(step));
    }
  }
  chart.xOf = x;
  const legend = $("legend");
  for (const series of SERIES) {
    const item = el("div");
    const swatch = el("span");
    swatch.style.background = series.color;
    item.append(swatch, series.label + " per step");
    legend.appendChild(item);
  }
}

// ------------------------------------------------------------------ the groups of the current step
function numberInput(id) {
  const value = parseFloat($(id).value);
  return isNaN(value) ? null : value;
}
function rewardColor(reward, low, high) {
  if (typeof reward !== "number") return "#ccc";
  const t = high > low ? (reward - low) / (high - low) : 1;
  return "hsl(" + Math.round(120 * t) + ", 65%, 42%)";
}
function imageNode(path) {
  const uri = DATA.images[path];
  if (!uri) return el("div", "missing-image", "missing: " + path);
  const img = el("img", "prompt-image");
  img.src = uri;
  img.alt = path;
  img.title = path;
  return img;
}

// ------------------------------------------------------------------ multi-turn records: the conversation
function leadingMessages(record) {
  // the messages before the model's first turn: the prompt (shown beside the responses)
  const messages = record.messages || [];
  const first = messages.findIndex((m) => m.role === "assistant");
  return first < 0 ? messages : messages.slice(0, first);
}
function promptImages(record) {
  if (!record.messages) return record.images || [];
  return leadingMessages(record).flatMap((m) => m.images || []);
}
function searchText(record) {
  const parts = [record.response || ""];
  for (const message of record.messages || []) {
    parts.push(message.content || "");
    for (const call of message.tool_calls || []) parts.push(call.name || "", JSON.stringify(call.arguments ?? ""));
  }
  return parts.join("\n").toLowerCase();
}
function toolCallNode(call) {
  const node = el("div", "tool-call");
  if (call.error !== undefined) {
    node.classList.add("tool-call-error");
    node.textContent = "malformed tool call: " + call.error;
    return node;
  }
  node.appendChild(el("span", "tool-name", call.name));
  const args = typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments);
  node.appendChild(el("pre", "tool-arguments", args));
  return node;
}
function turnNode(message) {
  const role = String(message.role);
  const turn = el("div", "turn turn-" + role.toLowerCase().replace(/[^a-z0-9_-]/g, "_"));
  turn.dataset.role = role;
  const head = el("div", "turn-head", role);
  if (message.cut) {
    turn.classList.add("cut");
    head.appendChild(el("span", "cut-note", "not shown to the model (the episode ended first)"));
  }
  turn.appendChild(head);
  if (message.content) turn.appendChild(el("pre", "turn-text", message.content));
  for (const call of message.tool_calls || []) turn.appendChild(toolCallNode(call));
  if ((message.images || []).length) {
    const images = el("div", "images");
    for (const path of message.images) images.appendChild(imageNode(path));
    turn.appendChild(images);
  }
  return turn;
}
function conversationNode(record) {
  const box = el("div", "conversation");
  const lead = leadingMessages(record).length;
  for (const message of record.messages.slice(lead)) box.appendChild(turnNode(message));
  return box;
}

function render() {
  const records = byStep.get(current) || [];
  const minReward = numberInput("min-reward"), maxReward = numberInput("max-reward");
  const text = $("text-filter").value.trim().toLowerCase();
  const rewards = records.map((r) => r.reward).filter((v) => typeof v === "number");
  const low = Math.min(...rewards), high = Math.max(...rewards);
  const groups = new Map();
  for (const record of records) {
    if (!groups.has(record.uid)) groups.set(record.uid, []);
    groups.get(record.uid).push(record);
  }
  const container = $("groups");
  container.replaceChildren();
  let shownResponses = 0, shownGroups = 0, index = 0;
  for (const [uid, members] of groups) {
    index += 1;
    const sorted = [...members].sort((a, b) => (b.reward ?? -Infinity) - (a.reward ?? -Infinity));
    const promptMatches = !text || (members[0].prompt || "").toLowerCase().includes(text);
    const visible = sorted.filter((r) =>
      (minReward === null || (r.reward !== null && r.reward >= minReward)) &&
      (maxReward === null || (r.reward !== null && r.reward <= maxReward)) &&
      (promptMatches || searchText(r).includes(text)));
    if (!visible.length) continue;
    shownGroups += 1;
    shownResponses += visible.length;
    const group = el("section", "group");
    group.dataset.uid = uid;
    const side = el("div", "group-side");
    side.appendChild(el("div", "group-title", "Prompt " + index + " \u00b7 mean reward " +
                                                fmt(mean(members.map((r) => r.reward)))));
    let meta = members.length + " responses" + (visible.length < members.length ? " (" + visible.length + " shown)" : "");
    if (members[0].ground_truth !== null && members[0].ground_truth !== undefined) {
      meta += " \u00b7 answer: " + (typeof members[0].ground_truth === "string" ? members[0].ground_truth
                                                                              : JSON.stringify(members[0].ground_truth));
    }
    side.appendChild(el("div", "group-meta", meta + " \u00b7 uid " + uid));
    for (const message of leadingMessages(members[0]).slice(0, -1)) side.appendChild(turnNode(message));  // system
    side.appendChild(el("pre", "prompt", members[0].prompt));
    const paths = promptImages(members[0]);
    if (paths.length) {
      const images = el("div", "images");
      for (const path of paths) images.appendChild(imageNode(path));
      side.appendChild(images);
    }
    const list = el("div", "responses");
    for (const record of visible) {
      const item = el("div", "response");
      item.dataset.reward = record.reward;
      item.style.borderLeftColor = rewardColor(record.reward, low, high);
      const head = el("div", "response-head");
      head.appendChild(el("span", "reward", "reward " + fmt(record.reward)));
      for (const [key, value] of Object.entries(record.scores || {})) {
        if (key === "overall") continue;
        const score = el("span", "score", key + " " + fmt(value));
        score.dataset.key = key;
        head.appendChild(score);
      }
      if (record.advantage !== null && record.advantage !== undefined) {
        head.appendChild(el("span", "advantage", "advantage " + fmt(record.advantage)));
      }
      head.appendChild(el("span", "length", record.response_length + " tokens"));
      if (record.env) {
        const counts = [["turns", "turns"], ["tool_calls", "tool calls"], ["tool_errors", "tool errors"],
                        ["cut_tool_messages", "cut tool results"]]
          .filter(([key]) => typeof record.env[key] === "number" && (key === "turns" || record.env[key] > 0))
          .map(([key, label]) => label + " " + fmt(record.env[key]));
        if (record.env.truncated) counts.push("truncated");
        head.appendChild(el("span", "env-counts", counts.join(" \u00b7 ")));
      }
      if (record.messages) item.append(head, conversationNode(record));
      else item.append(head, el("pre", "response-text", record.response));
      list.appendChild(item);
    }
    group.append(side, list);
    container.appendChild(group);
  }
  if (!shownGroups) container.appendChild(el("div", "empty", "No response of this step passes the filters."));
  $("shown-count").textContent = shownResponses + " of " + records.length + " responses, " + shownGroups + " of " +
                                 groups.size + " prompts";
  const summary = ["step " + current, "mean reward " + fmt(mean(records.map((r) => r.reward)))];
  if (accuracyKey) summary.push("mean " + accuracyKey + " " + fmt(mean(records.map((r) => (r.scores || {})[accuracyKey]))));
  $("step-summary").textContent = summary.join(" \u00b7 ");
}

function selectStep(step) {
  current = step;
  $("step-select").value = String(step);
  const position = steps.indexOf(step);
  $("prev-step").disabled = position <= 0;
  $("next-step").disabled = position >= steps.length - 1;
  const marker = $("chart-marker"), chart = $("chart");
  if (marker && chart.xOf) {
    marker.setAttribute("x1", chart.xOf(step));
    marker.setAttribute("x2", chart.xOf(step));
  }
  render();
  document.body.dataset.step = String(step);
}

function move(offset) {
  const position = steps.indexOf(current) + offset;
  if (position >= 0 && position < steps.length) selectStep(steps[position]);
}

for (const step of steps) {
  const option = el("option", null, "step " + step + " (" + byStep.get(step).length + " responses)");
  option.value = String(step);
  $("step-select").appendChild(option);
}
$("step-select").addEventListener("change", (event) => selectStep(Number(event.target.value)));
$("prev-step").addEventListener("click", () => move(-1));
$("next-step").addEventListener("click", () => move(1));
for (const id of ["min-reward", "max-reward", "text-filter"]) $(id).addEventListener("input", render);
document.addEventListener("keydown", (event) => {
  if (event.target.tagName === "INPUT" || event.target.tagName === "SELECT") return;
  if (event.key === "ArrowLeft") move(-1);
  if (event.key === "ArrowRight") move(1);
});
drawChart();
selectStep(current);
</script>
</body>
</html>
"""


if __name__ == "__main__":
    sys.exit(main())
