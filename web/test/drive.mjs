// Drive the built page in headless Debian chromium: for every case of a job file, open
// web/dist/verify.html from disk in a fresh page, give it the trusted key and the bundle (archive or
// folder) through its own inputs, wait for its verdict, and write what it found as JSON lines.
//
// node web/test/drive.mjs JOB.json OUT.jsonl
//   JOB.json: {"chromium": path, "screenshots": {name: png path}, "cases": [{"name", "kind":
//   "archive"|"folder", "path", "key": PEM text or null, "fingerprint": hex or null, "probe": bool}]}
//   A probe case then tries a fetch, an image and a WebSocket from inside the page.
// Every request the page makes is intercepted and refused, and counted: a page that asks the
// network for anything fails the test (requests in the output). CSP violations are counted too.

import { readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import puppeteer from 'puppeteer-core';

const here = dirname(fileURLToPath(import.meta.url));
const pageUrl = pathToFileURL(resolve(here, '..', 'dist', 'verify.html')).href;
const [jobPath, outPath] = process.argv.slice(2);
const job = JSON.parse(readFileSync(jobPath, 'utf8'));

function filesUnder(root) {
  const out = [];
  const walk = (dir) => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(p);
    }
  };
  walk(root);
  return out;
}

const browser = await puppeteer.launch({
  executablePath: job.chromium,
  headless: true,
  userDataDir: job.userDataDir,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-dev-shm-usage'],
});
const lines = [];
try {
  // The control: a page without the CSP asks for a URL; the interception must see and refuse it,
  // or an empty list of requests below would prove nothing.
  const control = await browser.newPage();
  const seen = [];
  await control.setRequestInterception(true);
  control.on('request', (req) => {
    seen.push(req.url());
    req.abort();
  });
  await control.evaluate(() => fetch('http://127.0.0.1:9/control').catch(() => {}));
  lines.push(JSON.stringify({ name: '__control__', requests: seen }));
  await control.close();
  for (const c of job.cases) {
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 1700 });
    const requests = [];
    await page.setRequestInterception(true);
    page.on('request', (req) => {
      if (req.url() === pageUrl + (c.fingerprint ? `#fingerprint=${c.fingerprint}` : '') || req.url() === pageUrl) {
        req.continue();
        return;
      }
      requests.push(req.url());
      req.abort();
    });
    const violations = [];
    await page.exposeFunction('__violation', (v) => violations.push(v));
    await page.evaluateOnNewDocument(() => {
      document.addEventListener('securitypolicyviolation', (e) => window.__violation(`${e.violatedDirective} ${e.blockedURI}`));
    });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(pageUrl + (c.fingerprint ? `#fingerprint=${c.fingerprint}` : ''), { waitUntil: 'load' });
    if (c.key) await page.$eval('#key', (el, v) => { el.value = v; }, c.key);
    // The renderer's CPU time (ProcessTime, all its threads), before and after: on a loaded machine
    // the wall time measures the load as much as the page.
    const cdp = await page.createCDPSession();
    await cdp.send('Performance.enable');
    const cpu = async () => Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));
    const cpu0 = await cpu();
    const started = Date.now();
    if (c.kind === 'archive') {
      const input = await page.$('#archive');
      await input.uploadFile(c.path);
    } else {
      // A folder input: the files with their relative paths, as a browser gives a chosen folder.
      const root = resolve(c.path);
      const files = filesUnder(root).map((p) => ({ rel: `${root.split('/').pop()}/${p.slice(root.length + 1)}`, data: readFileSync(p).toString('base64') }));
      await page.evaluate((list) => {
        const chosen = list.map((f) => {
          const bytes = Uint8Array.from(atob(f.data), (ch) => ch.charCodeAt(0));
          const file = new File([bytes], f.rel.split('/').pop());
          Object.defineProperty(file, 'webkitRelativePath', { value: f.rel });
          return file;
        });
        const input = document.getElementById('folder');
        Object.defineProperty(input, 'files', { value: chosen, configurable: true });
        input.dispatchEvent(new Event('change'));
      }, files);
    }
    let result = null;
    try {
      await page.waitForFunction(() => window.verification !== undefined, { timeout: c.timeoutMs || 60000, polling: 50 });
      result = await page.evaluate(() => window.verification);
    } catch (e) {
      result = { error: `no verdict: ${e.message}` };
    }
    const wall = (Date.now() - started) / 1000;
    const cpu1 = await cpu();
    const cpuSeconds = { process: cpu1.ProcessTime - cpu0.ProcessTime, thread: cpu1.ThreadTime - cpu0.ThreadTime };
    if (c.probe) {
      // What a script in the page could try: each must be stopped by the CSP before any request.
      await page.evaluate(async () => {
        await fetch('http://127.0.0.1:9/probe').catch(() => {});
        const img = new Image();
        img.src = 'http://127.0.0.1:9/probe.png';
        try { new WebSocket('ws://127.0.0.1:9/probe'); } catch { /* refused by the CSP */ }
        await new Promise((r) => setTimeout(r, 300));
      });
      // A worker started as the page starts its own (blob: URL) inherits the CSP: its fetch must be
      // stopped too; what it reports is recorded as a violation prefixed with "worker:".
      const fromWorker = await page.evaluate(() => new Promise((resolve) => {
        const code = "self.addEventListener('securitypolicyviolation', (e) => postMessage(`${e.violatedDirective} ${e.blockedURI}`));"
          + "fetch('http://127.0.0.1:9/probe-worker').catch(() => {});";
        const worker = new Worker(URL.createObjectURL(new Blob([code], { type: 'text/javascript' })));
        worker.onmessage = (e) => resolve(e.data);
        worker.onerror = () => resolve('error the worker did not start');
        setTimeout(() => resolve('none no violation reported'), 3000);
      }));
      violations.push(`worker:${fromWorker}`);
    }
    if (job.screenshots && job.screenshots[c.name]) await page.screenshot({ path: job.screenshots[c.name] });
    lines.push(JSON.stringify({ name: c.name, result, requests, violations, errors, wall, cpuSeconds }));
    await page.close();
  }
} finally {
  await browser.close();
}
writeFileSync(outPath, `${lines.join('\n')}\n`);
