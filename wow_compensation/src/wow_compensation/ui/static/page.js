// Live refresh of the operations page: every data-refresh seconds the #live region is
// fetched again (the same URL with partial=1) and swapped in; the version the forms act
// on follows what the page shows. Without JavaScript the page works, without refresh.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var seconds = parseFloat(document.body.getAttribute("data-refresh") || "0");
  var stamp = document.getElementById("refreshed");
  function partialUrl() {
    var url = new URL(window.location.href);
    url.searchParams.set("partial", "1");
    url.searchParams.delete("done");
    return url.toString();
  }
  function refresh() {
    fetch(partialUrl(), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
      .then(function (html) {
        live.innerHTML = html;
        var fresh = live.querySelector("[data-version]");
        if (fresh) {
          var version = fresh.getAttribute("data-version");
          document.querySelectorAll("input[name=expected_version]").forEach(function (input) { input.value = version; });
        }
        if (stamp) { stamp.textContent = "refreshed " + new Date().toLocaleTimeString(); }
      })
      .catch(function (error) { if (stamp) { stamp.textContent = "refresh failed (" + error + ")"; } })
      .finally(function () { window.setTimeout(refresh, seconds * 1000); });
  }
  if (seconds > 0) { window.setTimeout(refresh, seconds * 1000); }
})();
