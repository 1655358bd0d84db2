// The browser edition says so when Python cannot start, instead of a kernel that never does.
//
// JupyterLite's Pyodide kernel downloads Pyodide (and NumPy) from a CDN: the URL is the pyodideUrl
// that scripts/build-browser-site.py writes into jupyter-lite.json. When that server cannot be
// reached (offline, a blocked CDN), the kernel would stay "starting" without a word. This script,
// added to every app page of the site, asks the CDN for that file once and, if no answer comes
// within a few seconds, shows a notice in the notebook's language (from ?path=NAME.LANG.ipynb,
// else the browser's). A copy cached by the browser counts as reachable. The outcome is also left
// on the page, <html data-pyodide-check="reachable|unreachable">, for tests.
(function () {
  "use strict";

  const TIMEOUT_MS = 8000;
  const TEXT = {
    en: {
      title: "Python cannot start here right now.",
      body:
        "This page runs the notebook's Python in your browser with Pyodide, which the browser " +
        "downloads from {host} the first time. That server could not be reached: you may be offline, " +
        "or a network filter blocks it. The notebook below still shows the outputs of our last run; " +
        "to run it, connect to the internet and reload the page, or open the notebook in Colab or " +
        "in Jupyter (it needs only NumPy).",
      close: "Close",
    },
    zh: {
      title: "目前无法在这里启动 Python。",
      body:
        "本页面用 Pyodide 在浏览器中运行笔记本的 Python 代码，浏览器第一次运行时要从 {host} 下载 Pyodide。" +
        "现在无法访问该服务器：可能没有联网，或者网络屏蔽了它。下面的笔记本仍然显示我们最近一次运行的输出；" +
        "要运行代码，请联网后刷新本页面，或者在 Colab 或 Jupyter 中打开本笔记本（只需要 NumPy）。",
      close: "关闭",
    },
  };

  const script = document.currentScript;

  function language() {
    const path = new URLSearchParams(window.location.search).get("path") || "";
    const match = path.match(/\.([A-Za-z]+)(?:-[A-Za-z]+)?\.ipynb$/);
    if (match && TEXT[match[1].toLowerCase()]) return match[1].toLowerCase();
    for (const tag of navigator.languages || [navigator.language || "en"]) {
      const code = tag.slice(0, 2).toLowerCase();
      if (TEXT[code]) return code;
    }
    return "en";
  }

  async function pyodideUrl() {
    const response = await fetch(new URL("jupyter-lite.json", script.src));
    const config = (await response.json())["jupyter-config-data"] || {};
    const settings = (config.litePluginSettings || {})["@jupyterlite/pyodide-kernel-extension:kernel"] || {};
    return settings.pyodideUrl || null;
  }

  async function reachable(url) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), TIMEOUT_MS);
    try {
      // no-cors: an opaque answer is enough to know the server is there; force-cache: a copy the
      // browser already holds counts, as the kernel can use it too.
      await fetch(url, { mode: "no-cors", cache: "force-cache", signal: controller.signal });
      return true;
    } catch (error) {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  function showNotice(host) {
    const lang = language();
    const text = TEXT[lang];
    const notice = document.createElement("div");
    notice.id = "pyodide-offline";
    notice.setAttribute("role", "alert");
    notice.setAttribute("lang", lang === "zh" ? "zh-CN" : lang);
    notice.style.cssText =
      "position:fixed;top:0;left:0;right:0;z-index:10000;padding:12px 48px 12px 16px;" +
      "background:#fff3cd;color:#533f03;border-bottom:2px solid #d39e00;" +
      "font:15px/1.5 -apple-system,BlinkMacSystemFont,'Segoe UI',Helvetica,Arial,sans-serif;";
    const title = document.createElement("strong");
    title.textContent = text.title + " ";
    const body = document.createElement("span");
    body.textContent = text.body.replace("{host}", host);
    const close = document.createElement("button");
    close.type = "button";
    close.textContent = "×";
    close.title = text.close;
    close.setAttribute("aria-label", text.close);
    close.style.cssText =
      "position:absolute;top:8px;right:12px;border:0;background:none;font-size:22px;cursor:pointer;color:inherit;";
    close.addEventListener("click", () => notice.remove());
    notice.append(title, body, close);
    document.body.appendChild(notice);
  }

  async function check() {
    const url = await pyodideUrl();
    if (!url) return;
    const ok = await reachable(url);
    if (!ok) showNotice(new URL(url).host);
    document.documentElement.dataset.pyodideCheck = ok ? "reachable" : "unreachable";
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", check);
  } else {
    check();
  }
})();
