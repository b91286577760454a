// Drive Debian's headless Chromium (playwright-core, no downloaded browser) against a directory
// page, for tests/webui.rs. One command per run; prints one JSON line with what it saw.
//
//   node browse.mjs --resolve HOST=127.0.0.1:PORT [--shots DIR] COMMAND ARGS...
//     search URL TEXT          type TEXT in the search box, submit: {summary, names}
//     filter URL NAME=VALUE... tick those filter boxes, submit: {summary, names, url}
//     walk URL                 follow "Next page" to the end: {pages: [[names]]}
//     card URL                 {verified, signature}
//     audit URL NAME           dialogs, injected script, javascript: links, overflow at desktop
//                              and phone widths, axe-core violations; screenshots NAME-*.png
import { createRequire } from "node:module";
import path from "node:path";

// The oracle's node_modules (outside the repo) come by NODE_PATH; ES imports ignore it.
const require = createRequire(path.join(process.env.NODE_PATH || ".", "x.js"));
const { chromium } = require("playwright-core");
const args = process.argv.slice(2);
let resolve = "";
let shots = "";
while (args[0]?.startsWith("--")) {
  const flag = args.shift();
  if (flag === "--resolve") resolve = args.shift();
  else if (flag === "--shots") shots = args.shift();
}
const [command, url, ...rest] = args;
const [host, target] = resolve.split("=");

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    `--host-resolver-rules=MAP ${host} ${target}`,
  ],
});

const names = (page) => page.$$eval(".result h2", (hs) => hs.map((h) => h.textContent.trim()));
const summary = (page) => page.$eval(".summary", (p) => p.textContent.trim());

async function run() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  switch (command) {
    case "search": {
      await page.goto(url);
      await page.fill("#q", rest[0]);
      await Promise.all([page.waitForNavigation(), page.click("form.search .row button")]);
      return { summary: await summary(page), names: await names(page) };
    }
    case "filter": {
      await page.goto(url);
      for (const pair of rest) {
        const [name, value] = pair.split("=");
        await page.check(`input[name="${name}"][value="${value}"]`);
      }
      await Promise.all([page.waitForNavigation(), page.click("form.search > p > button")]);
      return { summary: await summary(page), names: await names(page), url: page.url() };
    }
    case "walk": {
      await page.goto(url);
      const pages = [];
      for (let i = 0; i < 200; i++) {
        pages.push(await names(page));
        const next = await page.$("a[rel=next]");
        if (!next) break;
        await Promise.all([page.waitForNavigation(), next.click()]);
      }
      return { pages };
    }
    case "badges": {
      // What each result's badges say, as a reader sees them (text) and as scripts read them.
      await page.goto(url);
      const results = await page.$$eval(".result", (rs) => rs.map((r) => {
        const reach = r.querySelector(".badge[data-reachable]");
        const life = r.querySelector(".badge[data-lifecycle]");
        return {
          name: r.querySelector("h2").textContent.trim(),
          reachable: reach ? reach.getAttribute("data-reachable") : null,
          reachableText: reach ? reach.textContent.trim() : null,
          visible: reach ? reach.getBoundingClientRect().width > 0 : false,
          lifecycle: life ? life.getAttribute("data-lifecycle") : null,
          lifecycleText: life ? life.textContent.trim() : null,
        };
      }));
      return { results };
    }
    case "card": {
      await page.goto(url);
      const sig = await page.$("[data-verified]");
      return {
        verified: sig ? await sig.getAttribute("data-verified") : null,
        signature: sig ? (await sig.textContent()).trim() : "",
        title: await page.title(),
      };
    }
    case "audit": {
      const dialogs = [];
      const result = {};
      for (const [label, width] of [["desktop", 1280], ["phone", 390]]) {
        const ctx = await browser.newContext({ viewport: { width, height: 900 } });
        const p = await ctx.newPage();
        p.on("dialog", async (d) => { dialogs.push(d.message()); await d.dismiss(); });
        await p.goto(url);
        await p.waitForLoadState("load");
        result[label] = await p.evaluate(() => ({
          pwned: typeof window.__pwned !== "undefined",
          scriptLinks: [...document.querySelectorAll("a")].filter((a) => /^\s*javascript:/i.test(a.getAttribute("href") || "")).length,
          overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
        }));
        if (shots) await p.screenshot({ path: path.join(shots, `${rest[0]}-${label}.png`), fullPage: true });
        await ctx.close();
      }
      // axe-core needs to run its own script: a context that bypasses the page's CSP for it.
      const axeCtx = await browser.newContext({ bypassCSP: true, viewport: { width: 1280, height: 900 } });
      const ap = await axeCtx.newPage();
      await ap.goto(url);
      await ap.addScriptTag({ path: require.resolve("axe-core/axe.min.js") });
      const axe = await ap.evaluate(async () => {
        const r = await window.axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa"] } });
        return r.violations.map((v) => `${v.id}: ${v.nodes.length} node(s)`);
      });
      await axeCtx.close();
      return { dialogs, ...result, violations: axe };
    }
    default:
      throw new Error(`unknown command ${command}`);
  }
}

try {
  console.log(JSON.stringify(await run()));
} catch (e) {
  console.log(JSON.stringify({ error: String(e && e.stack || e) }));
  process.exitCode = 1;
} finally {
  await browser.close();
}
