import SiwaHTTP

/// The console's own stylesheet, script and icon, served from `/console/assets/` (the CSP
/// allows nothing else: no inline style or script, no other origin). The pages work without
/// the script; it only adds confirmations, "select all" and the overview's refresh.
enum ConsoleAssets {
    static func response(for path: String) -> HTTPResponse? {
        let (body, type): (String, String)
        switch path {
        case "/console/assets/console.css": (body, type) = (css, "text/css; charset=utf-8")
        case "/console/assets/console.js": (body, type) = (js, "text/javascript; charset=utf-8")
        case "/console/assets/icon.svg": (body, type) = (icon, "image/svg+xml")
        default: return nil
        }
        var headers = ConsoleHandler.securityHeaders(contentType: type)
        headers.removeAll { $0.name == "Cache-Control" }
        headers.append(HTTPHeader("Cache-Control", "max-age=300"))
        return HTTPResponse(status: 200, headers: headers, body: Array(body.utf8))
    }

    static let icon = """
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="8" fill="#111827"/>\
        <path d="M9 17l5 5 9-11" stroke="#34d399" stroke-width="3.5" fill="none" stroke-linecap="round" stroke-linejoin="round"/></svg>
        """

    static let js = """
        "use strict";
        document.addEventListener("DOMContentLoaded", function () {
          document.querySelectorAll("form[data-confirm]").forEach(function (form) {
            form.addEventListener("submit", function (event) {
              if (!window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
            });
          });
          document.querySelectorAll("form.replay table").forEach(function (table) {
            var cell = table.querySelector("thead th");
            if (!cell) return;
            var all = document.createElement("input");
            all.type = "checkbox";
            all.setAttribute("aria-label", "select all");
            all.addEventListener("change", function () {
              table.querySelectorAll("tbody input[type=checkbox]").forEach(function (box) { box.checked = all.checked; });
            });
            cell.appendChild(all);
          });
          var zone = document.querySelector("form.danger-zone");
          if (zone) {
            var sub = zone.querySelector("input[name=sub]").value;
            var typed = zone.querySelector("input[name=confirm]");
            var button = zone.querySelector("button");
            var check = function () { button.disabled = typed.value.trim() !== sub; };
            typed.addEventListener("input", check);
            check();
          }
          // The overview's refresh is marked, so it does not count as the operator's activity:
          // a forgotten tab still reaches the idle limit. Signed out, it goes to the sign-in form.
          if (document.body.classList.contains("live")) {
            window.setInterval(function () {
              if (document.visibilityState !== "visible") return;
              fetch(window.location.href, { headers: { "X-Console-Refresh": "1" }, credentials: "same-origin" })
                .then(function (response) {
                  if (response.redirected) { window.location.assign(response.url); return null; }
                  return response.ok ? response.text() : null;
                })
                .then(function (html) {
                  if (!html) return;
                  var next = new DOMParser().parseFromString(html, "text/html").querySelector("main");
                  var main = document.querySelector("main");
                  if (next && main) main.replaceWith(document.adoptNode(next));
                })
                .catch(function () {});
            }, 15000);
          }
        });
        """

    static let css = """
        :root { --bg: #f6f7f9; --card: #fff; --ink: #111827; --muted: #6b7280; --line: #e5e7eb; --accent: #2563eb;
          --ok: #059669; --info: #2563eb; --warn: #d97706; --bad: #dc2626; color-scheme: light; }
        * { box-sizing: border-box; }
        body { margin: 0; background: var(--bg); color: var(--ink);
          font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
        a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
        code, .mono, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
        header.top { display: flex; align-items: center; gap: 24px; padding: 0 24px; height: 52px; background: #111827; color: #e5e7eb; }
        header.top .brand { color: #fff; font-weight: 650; letter-spacing: .2px; display: flex; align-items: center; gap: 8px; }
        header.top .logo { width: 20px; height: 20px; border-radius: 5px; background: url(/console/assets/icon.svg) center/cover; }
        header.top nav { display: flex; gap: 4px; flex: 1; overflow-x: auto; }
        header.top nav a { color: #cbd5e1; padding: 6px 10px; border-radius: 6px; white-space: nowrap; }
        header.top nav a:hover { background: #1f2937; text-decoration: none; }
        header.top nav a.active { background: #374151; color: #fff; }
        header.top .who { display: flex; align-items: center; gap: 10px; color: #9ca3af; font-size: 12px; }
        main { max-width: 1280px; margin: 0 auto; padding: 20px 24px 48px; }
        h1 { font-size: 22px; margin: 4px 0 16px; } h2 { font-size: 15px; margin: 0 0 12px; } h3 { font-size: 13px; margin: 16px 0 8px; }
        .card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 16px 18px; margin-bottom: 16px;
          box-shadow: 0 1px 2px rgba(0,0,0,.03); }
        .stats { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 12px; margin-bottom: 16px; }
        .stat { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; border-top: 3px solid var(--line); }
        .stat .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .4px; }
        .stat .value { font-size: 26px; font-weight: 650; margin: 2px 0; font-variant-numeric: tabular-nums; }
        .stat .note { color: var(--muted); font-size: 12px; }
        .stat.info { border-top-color: var(--info); } .stat.warn { border-top-color: var(--warn); } .stat.bad { border-top-color: var(--bad); }
        .stat.bad .value { color: var(--bad); } .stat.muted .value { color: var(--muted); }
        .charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 12px; }
        figure.chart { margin: 0 0 12px; background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px 6px; }
        figure.chart figcaption { font-weight: 600; margin-bottom: 6px; }
        svg .grid { stroke: #eef0f3; stroke-width: 1; } svg .axisline { stroke: #9ca3af; stroke-width: 1; }
        svg text { fill: var(--muted); font-size: 10.5px; } svg .unit { font-size: 10px; }
        .s0 { fill: #2563eb; background: #2563eb; } .s1 { fill: #059669; background: #059669; } .s2 { fill: #d97706; background: #d97706; }
        .s3 { fill: #dc2626; background: #dc2626; } .s4 { fill: #7c3aed; background: #7c3aed; } .s5 { fill: #0891b2; background: #0891b2; }
        ul.legend { list-style: none; display: flex; flex-wrap: wrap; gap: 14px; padding: 0; margin: 4px 0 6px; font-size: 12px; }
        .swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px; vertical-align: -1px; }
        .grid2 { display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 16px; }
        .grid4 { display: grid; grid-template-columns: repeat(auto-fit, minmax(250px, 1fr)); gap: 16px; margin-bottom: 16px; }
        .grid2 > .card, .grid4 > .card { margin-bottom: 0; } section.grid2 { margin-bottom: 16px; }
        dl { display: grid; grid-template-columns: max-content 1fr; gap: 6px 18px; margin: 0; }
        dt { color: var(--muted); } dd { margin: 0; font-variant-numeric: tabular-nums; word-break: break-all; }
        .scroll { overflow-x: auto; }
        table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
        th, td { text-align: left; padding: 7px 10px; border-bottom: 1px solid var(--line); vertical-align: middle; }
        th { color: var(--muted); font-weight: 600; font-size: 12px; background: #fafbfc; white-space: nowrap; }
        tbody tr:hover { background: #f9fafb; }
        .clip { display: inline-block; max-width: 340px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; vertical-align: bottom; }
        .badge { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 12px; font-weight: 600; background: #f3f4f6; color: #374151; }
        .badge.ok { background: #d1fae5; color: #065f46; } .badge.info { background: #dbeafe; color: #1e40af; }
        .badge.warn { background: #fef3c7; color: #92400e; } .badge.bad { background: #fee2e2; color: #991b1b; }
        .count { background: #f3f4f6; border-radius: 999px; padding: 0 8px; font-size: 12px; color: var(--muted); margin-left: 6px; }
        button, .button { font: inherit; border-radius: 7px; padding: 7px 14px; border: 1px solid transparent; cursor: pointer; display: inline-block; }
        button.primary, .button { background: var(--accent); color: #fff; } button.primary:hover, .button:hover { background: #1d4ed8; text-decoration: none; }
        button.secondary { background: #fff; border-color: #d1d5db; color: var(--ink); } button.secondary:hover { background: #f3f4f6; }
        button.small { padding: 3px 10px; font-size: 12px; background: #fff; border-color: #d1d5db; }
        button.danger { background: var(--bad); color: #fff; } button.danger:disabled { opacity: .45; cursor: not-allowed; }
        button.link { background: none; color: #cbd5e1; padding: 4px 8px; border: 1px solid #374151; }
        form.inline { display: inline; } .actions { display: flex; flex-wrap: wrap; gap: 8px; margin-top: 12px; }
        .filters { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-end; }
        .filters label { display: flex; flex-direction: column; gap: 4px; color: var(--muted); font-size: 12px; }
        input, select { font: inherit; padding: 6px 9px; border: 1px solid #d1d5db; border-radius: 7px; background: #fff; color: var(--ink); }
        input:focus, select:focus { outline: 2px solid #bfdbfe; border-color: var(--accent); }
        .signin { max-width: 420px; margin: 40px auto; display: flex; flex-direction: column; gap: 10px; }
        .danger-zone { border: 1px solid #fecaca; background: #fef2f2; border-radius: 8px; padding: 12px 14px; display: flex; flex-direction: column; gap: 8px; margin-top: 12px; }
        .danger-zone h3 { margin: 0; color: #991b1b; } .danger-zone p { margin: 0; }
        .notice { background: #ecfdf5; border: 1px solid #a7f3d0; color: #065f46; padding: 10px 14px; border-radius: 8px; }
        p.error, pre.error { background: #fef2f2; border: 1px solid #fecaca; color: #991b1b; padding: 10px 14px; border-radius: 8px; white-space: pre-wrap; }
        pre.claims { background: #0f172a; color: #e2e8f0; padding: 14px; border-radius: 8px; margin: 0; white-space: pre-wrap; word-break: break-all; }
        .empty { color: var(--muted); font-style: italic; } .muted { color: var(--muted); } .small { font-size: 12px; }
        .pager { text-align: right; }
        """
}
