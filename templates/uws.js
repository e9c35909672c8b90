/* The UWS pages work without this script; it only shows times in local time and keeps
   jobs up to date while they run, reading the job's UWS XML (blocking GET with WAIT). */
"use strict";

(function () {
  const UWS = "http://www.ivoa.net/xml/UWS/v1.0";
  const INFO = "urn:ivoa-uws-server:jobinfo";
  const ACTIVE = ["PENDING", "QUEUED", "EXECUTING"];
  const LIST_WATCH_LIMIT = 10;
  // Once the reader submits a form the page is on its way out: no reload may cancel that.
  let leaving = false;
  document.addEventListener("submit", () => { leaving = true; });
  window.addEventListener("pagehide", () => { leaving = true; });
  // Back from the page cache, the page shows an old state: show the job as it is now.
  window.addEventListener("pageshow", (event) => { if (event.persisted) window.location.reload(); });

  function localTimes(root) {
    const format = new Intl.DateTimeFormat(undefined, {
      year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", second: "2-digit",
    });
    for (const el of root.querySelectorAll("time[datetime]")) {
      const when = new Date(el.getAttribute("datetime"));
      if (isNaN(when)) continue;
      el.dataset.utc = el.dataset.utc || el.textContent.trim();
      el.title = el.dataset.utc;
      el.textContent = unbroken(format.formatToParts(when));
      el.classList.add("local");
    }
    // The statistics chart's axis (SVG text holds no <time>): local, as the table beside it.
    for (const el of root.querySelectorAll("text[data-datetime]")) {
      const when = new Date(el.dataset.datetime);
      if (isNaN(when)) continue;
      el.textContent = format.format(when);
      el.classList.add("local");
    }
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "your time zone";
    setText(root, "time-note", `Times are in your local time (${zone}); hover one for UTC.`);
  }

  // A time's text, breakable only between its date and its time of day (narrow columns).
  function unbroken(parts) {
    return parts.map((part, i) => (part.type === "literal" && parts[i + 1]?.type === "hour")
      ? part.value : part.value.replace(/\s/g, "\u00a0")).join("");
  }

  function seconds(value) {
    const total = Math.round(value);
    const h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60), s = total % 60;
    const parts = [];
    if (h) parts.push(h + " h");
    if (m) parts.push(m + " min");
    if (s || !(h || m)) parts.push(s + " s");
    return parts.join(" ");
  }

  function readJob(xmlText) {
    const doc = new DOMParser().parseFromString(xmlText, "application/xml");
    const phase = doc.getElementsByTagNameNS(UWS, "phase")[0];
    if (!phase) throw new Error("not a UWS job document");
    const info = doc.getElementsByTagNameNS(INFO, "progress")[0];
    const number = (name) => info && info.hasAttribute(name) ? parseFloat(info.getAttribute(name)) : null;
    const text = (name) => doc.getElementsByTagNameNS(UWS, name)[0]?.textContent.trim() || "";
    return {
      phase: phase.textContent.trim(),
      started: text("startTime") !== "",
      startTime: text("startTime"),
      quote: text("quote"),
      percent: number("percent"),
      elapsed: number("elapsedSeconds"),
      remaining: number("remainingSeconds"),
      message: info ? info.textContent : "",
    };
  }

  function setText(root, role, text) {
    for (const el of root.querySelectorAll(`[data-role="${role}"]`)) el.textContent = text;
  }

  function showPhase(root, phase) {
    root.dataset.phase = phase;
    for (const el of root.querySelectorAll('[data-role="phase"]')) {
      el.textContent = phase;
      el.className = "badge phase-" + phase.toLowerCase();
    }
    for (const form of root.querySelectorAll("form[data-when]")) {
      form.hidden = !form.dataset.when.split(" ").includes(phase);
    }
  }

  /* A <dd data-role=...> holding one time: the time element, or a dash when unset. */
  function showTime(root, role, iso) {
    for (const el of root.querySelectorAll(`[data-role="${role}"]`)) {
      if ((el.querySelector("time")?.getAttribute("datetime") || "") === iso) continue;
      if (!iso) {
        const none = document.createElement("span");
        none.className = "none";
        none.textContent = "—";
        el.replaceChildren(none);
        continue;
      }
      const time = document.createElement("time");
      time.setAttribute("datetime", iso);
      time.textContent = iso.replace("T", " ").replace(/(\.\d+)?Z$/, " UTC");
      el.replaceChildren(time);
      localTimes(el);
    }
  }

  function progressBar(root) {
    let bar = root.querySelector('[data-role="bar"]');
    const cell = root.querySelector(".progress-cell");
    if (!bar && cell) {
      bar = document.createElement("progress");
      bar.max = 100;
      bar.dataset.role = "bar";
      const percent = document.createElement("span");
      percent.className = "muted";
      percent.dataset.role = "percent";
      cell.replaceChildren(bar, percent);
    }
    return bar;
  }

  function showProgress(root, job) {
    const card = root.querySelector('[data-role="progress-card"]');
    if (card && (job.started || job.percent !== null)) card.hidden = false;
    if (job.phase !== "EXECUTING" && !card) {
      const cell = root.querySelector(".progress-cell");
      if (cell) cell.replaceChildren();
      return;
    }
    const percent = job.phase === "COMPLETED" ? 100 : (job.percent || 0);
    const bar = progressBar(root);
    if (bar) {
      bar.value = percent;
      bar.textContent = Math.round(percent) + "%";
    }
    setText(root, "percent", Math.round(percent) + "%");
    setText(root, "message", job.message);
    setText(root, "elapsed", job.elapsed !== null ? seconds(job.elapsed) + " elapsed" : "");
    setText(root, "remaining", job.remaining !== null ? "about " + seconds(job.remaining) + " remaining" : "");
  }

  const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  /* Follow one job until it leaves the active phases; then call done(phase). */
  async function follow(root, done) {
    const url = root.dataset.jobUrl;
    let phase = root.dataset.phase;
    while (ACTIVE.includes(phase)) {
      if (leaving) return;
      const wait = phase === "EXECUTING" ? 1 : 20;
      let response;
      try {
        response = await fetch(`${url}?WAIT=${wait}&PHASE=${encodeURIComponent(phase)}`,
                               {headers: {Accept: "application/xml"}, cache: "no-store"});
      } catch (err) {
        await pause(3000);
        continue;
      }
      if (response.status === 404) {
        showPhase(root, "DELETED");
        return;
      }
      if (!response.ok) {
        await pause(3000);
        continue;
      }
      const job = readJob(await response.text());
      if (leaving) return;
      showPhase(root, job.phase);
      showProgress(root, job);
      showTime(root, "started", job.startTime);
      showTime(root, "quote", job.quote);
      phase = job.phase;
    }
    done(phase);
  }

  function followJobPage() {
    const page = document.querySelector("article.job[data-job-url]");
    if (page && ACTIVE.includes(page.dataset.phase)) {
      // The results and the error appear with the final phase: show them once.
      follow(page, () => { if (!leaving) window.location.reload(); });
    }
  }

  function followListRows() {
    const rows = document.querySelectorAll(
      'tr[data-job-url][data-phase="EXECUTING"], tr[data-job-url][data-phase="QUEUED"]');
    for (const row of Array.from(rows).slice(0, LIST_WATCH_LIMIT)) follow(row, () => {});
  }

  /* A batch page while its jobs wait or run: read the same page again and put its
     live parts (status, progress with the counts by phase, callback, jobs) in place, until
     the batch's status is final. The page is what the server renders, so the two can
     never disagree; without this script the page is right as of its loading. */
  const BATCH_ACTIVE = ["pending", "processing"];

  async function followBatchPage() {
    const page = document.querySelector("article.batch[data-batch-url]");
    if (!page) return;
    let status = page.dataset.status;
    while (BATCH_ACTIVE.includes(status)) {
      await pause(status === "processing" ? 1000 : 5000);
      if (leaving) return;
      let response;
      try {
        response = await fetch(window.location.href,
                               {headers: {Accept: "text/html"}, cache: "no-store"});
      } catch (err) {
        continue;
      }
      if (response.status === 404) {
        setText(page, "status", "deleted");
        return;
      }
      if (!response.ok) continue;
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = doc.querySelector("article.batch[data-batch-url]");
      if (!fresh || leaving) return;
      for (const part of page.querySelectorAll("[data-live]")) {
        const next = fresh.querySelector(`[data-live="${part.dataset.live}"]`);
        if (!next) continue;
        const adopted = document.importNode(next, true);
        part.replaceWith(adopted);
        localTimes(adopted);
      }
      status = page.dataset.status = fresh.dataset.status;
    }
  }

  function start() {
    localTimes(document);
    followJobPage();
    followListRows();
    followBatchPage();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
