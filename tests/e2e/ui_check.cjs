// Drives the page of `cdcflow ui` in headless Chromium (Debian's, through
// playwright-core; tests/e2e/ui.rs): waits for the page, lists the graph's nodes and
// those drawn as failed, clicks a node if asked and reads its detail (the lag chart's
// points), takes screenshots if asked, and prints what it found as one JSON object.
// Usage: node ui_check.cjs URL [--click NODE_ID] [--shot FILE] [--shot-after-click FILE]
//        [--wait-done NODE_ID] (prints `watching` on stderr, then waits for the node's ✔)
"use strict";
const path = require("path");
const { chromium } = require(path.join(process.env.CDCFLOW_PLAYWRIGHT, "node_modules", "playwright-core"));

async function main() {
  const [url, ...rest] = process.argv.slice(2);
  const arg = name => { const i = rest.indexOf(name); return i >= 0 ? rest[i + 1] : null; };
  const browser = await chromium.launch({
    executablePath: process.env.CDCFLOW_CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const out = { errors: [] };
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 820 } });
    page.on("pageerror", e => out.errors.push(String(e)));
    page.on("console", m => { if (m.type() === "error") out.errors.push(m.text()); });
    await page.goto(url);
    await page.waitForSelector("body[data-ready=true]", { timeout: 20000 });
    out.title = await page.textContent("#pipeline-name");
    out.nodes = await page.$$eval("[data-node]", ns => ns.map(n => n.getAttribute("data-node")));
    out.failed = await page.$$eval("[data-node].failed", ns => ns.map(n => n.getAttribute("data-node")));
    out.badges = await page.$$eval("[data-node]", ns => Object.fromEntries(ns.map(n => [n.getAttribute("data-node"), n.querySelector(".badge").textContent])));
    out.diagnostics = await page.$$eval("[data-diagnostic]", ds => ds.map(d => d.textContent));
    out.summary = await page.textContent("#summary");
    if (arg("--shot")) await page.screenshot({ path: arg("--shot") });
    const live = arg("--wait-done");
    if (live) {
      // The page follows runs made meanwhile: it says when it is watching, then waits
      // for the node's badge to turn to done.
      const badge = `[data-node="${live}"] .badge`;
      out.badge_before = await page.textContent(badge);
      process.stderr.write("watching\n");
      await page.waitForFunction(sel => document.querySelector(sel).textContent === "✔", badge, { timeout: 30000 });
      out.badge_after = await page.textContent(badge);
    }
    const click = arg("--click");
    if (click) {
      await page.click(`[data-node="${click}"]`);
      await page.waitForSelector(`[data-detail="${click}"]`, { timeout: 20000 });
      out.detail = await page.textContent(`[data-detail="${click}"]`);
      out.chart_points = await page.$$eval(`[data-detail="${click}"] svg.lag-chart circle`, cs => cs.length);
      out.failed_points = await page.$$eval(`[data-detail="${click}"] svg.lag-chart circle.failed`, cs => cs.length);
      out.hash = await page.evaluate(() => location.hash);
      if (arg("--shot-after-click")) await page.screenshot({ path: arg("--shot-after-click") });
    }
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch(e => { process.stderr.write(String(e && e.stack || e) + "\n"); process.exit(1); });
