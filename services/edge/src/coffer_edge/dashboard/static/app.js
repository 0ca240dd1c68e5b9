// Coffer dashboard: the little JavaScript it has. Every form works without it; this adds
// copy buttons (with a select-all fallback) and a password show toggle. htmx gets the CSRF
// header from hx-headers on <body>.
"use strict";

function copyFrom(button) {
  const target = document.getElementById(button.dataset.copy);
  if (!target) return;
  const text = target.value !== undefined ? target.value : target.textContent;
  const done = (label) => {
    const before = button.textContent;
    button.textContent = label;
    setTimeout(() => { button.textContent = before; }, 1500);
  };
  const selectAll = () => {
    if (target.select) { target.focus(); target.select(); }
    else { const range = document.createRange(); range.selectNodeContents(target);
      const sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range); }
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(() => done("Copied"), () => { selectAll(); done("Press Ctrl+C"); });
  } else {
    selectAll();
    done("Press Ctrl+C");
  }
}

document.addEventListener("click", (event) => {
  const copy = event.target.closest("[data-copy]");
  if (copy) { event.preventDefault(); copyFrom(copy); return; }
  const toggle = event.target.closest("[data-toggle-password]");
  if (toggle) {
    const input = document.getElementById(toggle.dataset.togglePassword);
    const hidden = input.type === "password";
    input.type = hidden ? "text" : "password";
    toggle.textContent = hidden ? "Hide" : "Show";
    toggle.setAttribute("aria-pressed", hidden ? "true" : "false");
  }
});

// Read-only secret fields select themselves on focus, so a manual copy takes one keystroke.
document.addEventListener("focusin", (event) => {
  if (event.target.matches && event.target.matches("input[data-select-on-focus]")) event.target.select();
});

// Buttons that were hidden for the no-JavaScript page (copy, show) appear once this runs.
document.documentElement.classList.add("js");


// A page showing a secret forgets it when left, so Back (the back/forward cache) never shows it.
window.addEventListener("pagehide", () => {
  const secrets = document.querySelectorAll("[data-secret]");
  if (!secrets.length) return;
  secrets.forEach((el) => { if (el.tagName === "INPUT") el.value = ""; else el.textContent = ""; });
  document.querySelectorAll(".secret-block").forEach((el) => { el.hidden = true; });
  document.querySelectorAll(".secret-gone").forEach((el) => { el.hidden = false; });
});

// File browser uploads: one XHR per file straight to the dashboard's upload route (the session
// cookie and the X-CSRF-Token header authenticate it), or, above 8 MiB, resumably through tus;
// three at a time, each with a progress bar, a Cancel button and its own result. Files over the
// limit are refused before any request.
const UPLOADS_AT_ONCE = 3;

function binarySize(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let size = bytes, unit = 0;
  while (Math.abs(size) >= 1024 && unit < units.length - 1) { size /= 1024; unit += 1; }
  return unit === 0 ? `${bytes} B` : `${size.toFixed(1).replace(/\.0$/, "")} ${units[unit]}`;
}

// Where tus-js-client keeps unfinished uploads' URLs (each carries its upload's capability):
// this tab's sessionStorage, which a reload keeps and signing out clears (Clear-Site-Data), not
// its default localStorage, which outlived the session. Its WebStorageUrlStorage, on another store.
const TUS_PREFIX = "tus::";

function tabStore() {
  try { return window.sessionStorage; } catch (_) { return null; }  // (blocked storage)
}

function storedUploads(prefix) {
  const store = tabStore();
  const found = [];
  if (!store) return found;
  for (let i = 0; i < store.length; i += 1) {
    const key = store.key(i);
    if (!key || !key.startsWith(prefix)) continue;
    try { found.push({ ...JSON.parse(store.getItem(key)), urlStorageKey: key }); } catch (_) { /* not ours */ }
  }
  return found;
}

const tabUrlStorage = {
  findAllUploads: () => Promise.resolve(storedUploads(TUS_PREFIX)),
  findUploadsByFingerprint: (fingerprint) => Promise.resolve(storedUploads(`${TUS_PREFIX}${fingerprint}::`)),
  removeUpload: (key) => { const store = tabStore(); if (store) store.removeItem(key); return Promise.resolve(); },
  addUpload: (fingerprint, upload) => {
    const store = tabStore();
    if (!store) return Promise.resolve(undefined);
    const key = `${TUS_PREFIX}${fingerprint}::${Math.round(Math.random() * 1e12)}`;
    try { store.setItem(key, JSON.stringify(upload)); } catch (_) { return Promise.resolve(undefined); }
    return Promise.resolve(key);
  },
};

// URLs an earlier version of this page left in localStorage go (they would outlive the session).
function dropLocalUploads() {
  try {
    for (let i = window.localStorage.length - 1; i >= 0; i -= 1) {
      const key = window.localStorage.key(i);
      if (key && key.startsWith(`${TUS_PREFIX}coffer/`)) window.localStorage.removeItem(key);
    }
  } catch (_) { /* blocked storage */ }
}

function setupUploads(form) {
  const input = form.querySelector("input[type=file]");
  const list = document.getElementById("uploads");
  const zone = document.getElementById("dropzone");
  const maxBytes = Number(form.dataset.maxBytes);
  const resumableAbove = Number(form.dataset.resumableAbove);
  const csrf = form.querySelector("input[name=csrf_token]").value;
  const queue = [];
  let active = 0;
  input.multiple = true;
  input.required = false;

  function row(file) {
    const li = document.createElement("li");
    const name = document.createElement("span");
    name.className = "file"; name.textContent = file.name; name.title = file.name;
    const cancel = document.createElement("button");
    cancel.type = "button"; cancel.className = "link"; cancel.textContent = "Cancel";
    const bar = document.createElement("progress");
    bar.max = 100; bar.value = 0;
    const status = document.createElement("span");
    status.className = "status"; status.textContent = `${binarySize(file.size)} · waiting`;
    li.append(name, cancel, bar, status);
    list.append(li);
    return { li, cancel, bar, status };
  }

  function finish(item, ok, message, link) {
    item.li.classList.add(ok ? "done" : "failed");
    item.cancel.remove();
    item.status.textContent = message;
    if (link) {
      const a = document.createElement("a");
      a.href = link.href; a.textContent = link.text;
      item.status.append(" ", a);
    }
  }

  function refreshListing() {
    if (active || queue.length) return;
    if (window.htmx) {
      window.htmx.ajax("GET", form.dataset.listingUrl, { target: "#listing", swap: "outerHTML" });
    }
  }

  function next() {
    while (active < UPLOADS_AT_ONCE && queue.length) send(queue.shift());
    refreshListing();
  }

  function send(item) {
    active += 1;
    if (window.tus && item.file.size > resumableAbove) {
      sendResumable(item);
      return;
    }
    const xhr = new XMLHttpRequest();
    item.xhr = xhr;
    xhr.open("POST", form.action);
    xhr.setRequestHeader("X-CSRF-Token", csrf);
    xhr.upload.addEventListener("progress", (e) => {
      if (!e.lengthComputable) return;
      item.bar.value = Math.floor((e.loaded / e.total) * 100);
      item.status.textContent = `${binarySize(e.loaded)} of ${binarySize(item.file.size)}`;
    });
    const settle = (ok, message, link) => { finish(item, ok, message, link); active -= 1; next(); };
    xhr.addEventListener("load", () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (_) { body = null; }
      if (xhr.status === 201 && body && body.asset) {
        item.bar.value = 100;
        settle(true, `Uploaded, ${body.size}.`, { href: body.page, text: "Open" });
      } else if (body && body.error) {
        const quota = body.error.code === "quota_exceeded";
        settle(false, body.error.message, quota ? { href: form.dataset.usageUrl, text: "See usage" } : null);
      } else if (xhr.responseURL.includes("/dashboard/login")) {
        settle(false, "Your session ended. Sign in again, then upload.");
      } else {
        settle(false, `The upload failed (HTTP ${xhr.status}). Try again.`);
      }
    });
    xhr.addEventListener("error", () => settle(false, "The upload failed: the connection broke."));
    xhr.addEventListener("abort", () => settle(false, "Cancelled."));
    const data = new FormData();
    data.append("file", item.file, item.file.name);
    item.status.textContent = `0 B of ${binarySize(item.file.size)}`;
    xhr.send(data);
  }

  // Files above 8 MiB: tus (tus-js-client), 8 MiB a request. A dropped connection is retried
  // from the offset the service holds; after a reload, choosing the same file again resumes it
  // (its upload URL, with the upload's capability, is kept in this tab's sessionStorage under
  // the organization, folder and file, until it completes or the session signs out).
  function errorOf(err) {
    const res = err && err.originalResponse;
    if (!res) return "The upload failed: the connection broke.";
    try {
      const body = JSON.parse(res.getBody());
      if (body && body.error) return body.error.message;
    } catch (_) { /* not the envelope */ }
    return `The upload failed (HTTP ${res.getStatus()}). Try again.`;
  }

  async function endpointFor(item) {
    const url = `${form.dataset.resumableUrl}${form.dataset.resumableUrl.includes("?") ? "&" : "?"}size=${item.file.size}`;
    const res = await fetch(url, { method: "POST", headers: { "X-CSRF-Token": csrf }, credentials: "same-origin" });
    let body = null;
    try { body = await res.json(); } catch (_) { body = null; }
    if (res.ok && body && body.endpoint) return body.endpoint;
    if (body && body.error) throw new Error(body.error.message);
    if (res.url.includes("/dashboard/login")) throw new Error("Your session ended. Sign in again, then upload.");
    throw new Error(`The upload could not start (HTTP ${res.status}). Try again.`);
  }

  async function sendResumable(item) {
    const file = item.file;
    const settle = (ok, message, link) => { finish(item, ok, message, link); active -= 1; next(); };
    let upload = null;
    item.abort = () => {
      if (upload) upload.abort(true).catch(() => {});  // true: the service deletes what it has
      settle(false, "Cancelled.");
    };
    try {
      const endpoint = await endpointFor(item);
      upload = new window.tus.Upload(file, {
        endpoint,
        chunkSize: 8 * 1024 * 1024,
        retryDelays: [0, 1000, 2000, 3000, 5000, 5000, 10000, 10000, 20000, 30000],
        metadata: { filename: file.name, filetype: file.type || "application/octet-stream" },
        fingerprint: (f) => Promise.resolve(
          ["coffer", form.dataset.fingerprint, f.name, f.type, f.size, f.lastModified].join("/")),
        removeFingerprintOnSuccess: true,
        urlStorage: tabUrlStorage,
        onProgress: (sent, total) => {
          item.bar.value = Math.floor((sent / total) * 100);
          const resumed = item.li.classList.contains("resumed") ? " · resumed" : "";
          item.status.textContent = `${binarySize(sent)} of ${binarySize(total)}${resumed}`;
        },
        onShouldRetry: (err, attempt) => {
          item.status.textContent = `Connection lost; retrying (${attempt + 1})…`;
          const status = err && err.originalResponse ? err.originalResponse.getStatus() : 0;
          return !(status >= 400 && status < 500 && status !== 409 && status !== 423);
        },
        onSuccess: ({ lastResponse }) => {
          const assetId = lastResponse.getHeader("Coffer-Asset-Id");
          item.bar.value = 100;
          settle(true, `Uploaded, ${binarySize(file.size)}.`,
            assetId ? { href: `${form.dataset.filesUrl}/${assetId}`, text: "Open" } : null);
        },
        onError: (err) => settle(false, errorOf(err)),
      });
      const previous = await upload.findPreviousUploads();
      if (previous.length) {
        upload.resumeFromPreviousUpload(previous[0]);
        item.li.classList.add("resumed");
        item.status.textContent = "Resuming where it stopped…";
      }
      upload.start();
    } catch (err) {
      settle(false, err.message || String(err));
    }
  }

  function add(files) {
    for (const file of files) {
      const item = row(file);
      item.file = file;
      if (file.size > maxBytes) {
        finish(item, false, `Refused before sending: ${file.size.toLocaleString("en")} bytes is larger than 100 MiB (${maxBytes.toLocaleString("en")} bytes).`);
        continue;
      }
      item.cancel.addEventListener("click", () => {
        if (item.xhr) { item.xhr.abort(); return; }
        if (item.abort) { item.abort(); return; }
        const at = queue.indexOf(item);
        if (at >= 0) queue.splice(at, 1);
        finish(item, false, "Cancelled.");
        refreshListing();
      });
      queue.push(item);
    }
    next();
  }

  input.addEventListener("change", () => { add(Array.from(input.files)); input.value = ""; });
  form.addEventListener("submit", (e) => { e.preventDefault(); add(Array.from(input.files)); input.value = ""; });
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault(); zone.classList.remove("over");
    if (e.dataTransfer && e.dataTransfer.files.length) add(Array.from(e.dataTransfer.files));
  });
}

// Text previews: the first 64 KiB from the CDN (a signed URL), shown as text, never as HTML.
function setupTextPreview(pre) {
  const bytes = Number(pre.dataset.textBytes);
  fetch(pre.dataset.textUrl, { headers: { Range: `bytes=0-${bytes - 1}` } })
    .then((r) => (r.ok ? r.text() : Promise.reject(new Error(`HTTP ${r.status}`))))
    .then((text) => {
      pre.textContent = text;
      const note = document.getElementById("preview-text-note");
      if (note && new TextEncoder().encode(text).length >= bytes) note.hidden = false;
    })
    .catch((err) => { pre.textContent = `The preview did not load (${err.message}).`; });
}

document.addEventListener("DOMContentLoaded", () => {
  dropLocalUploads();
  const form = document.getElementById("upload-form");
  if (form) setupUploads(form);
  const pre = document.getElementById("preview-text");
  if (pre) setupTextPreview(pre);
});

// Grid thumbnails that do not load (a file whose bytes are not the image its type says, a CDN
// with transforms switched off) give way to the file's type icon, never a broken image. The
// error event does not bubble: it is caught on the way down, for htmx's swapped-in grids too.
function thumbFailed(img) {
  img.hidden = true;
  dropPlaceholder(img);
  const icon = img.nextElementSibling;
  if (icon && icon.classList.contains("file-icon")) icon.hidden = false;
}

// A thumbnail that loaded takes the place of its BlurHash placeholder (issue 50), the image
// under it, which would otherwise show around a thumbnail that is not square.
function dropPlaceholder(img) {
  const placeholder = img.previousElementSibling;
  if (placeholder && placeholder.classList.contains("placeholder")) placeholder.hidden = true;
}

document.addEventListener("load", (event) => {
  const img = event.target;
  if (img instanceof HTMLImageElement && img.hasAttribute("data-thumb")) dropPlaceholder(img);
}, true);

document.addEventListener("error", (event) => {
  const img = event.target;
  if (img instanceof HTMLImageElement && img.hasAttribute("data-thumb")) thumbFailed(img);
}, true);

// Any that failed or loaded before this script ran.
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("img[data-thumb]").forEach((img) => {
    if (img.complete && img.naturalWidth === 0 && img.getAttribute("src")) thumbFailed(img);
    else if (img.complete && img.naturalWidth > 0) dropPlaceholder(img);
  });
});
