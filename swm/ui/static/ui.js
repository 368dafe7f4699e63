// Sort any table.sortable by a click on a column head (numbers by value, data-sort first), and
// filter a table's rows by the text typed in an input.filterbox (data-table names the table).
(function () {
  function key(cell) {
    var raw = cell.getAttribute('data-sort');
    var text = raw !== null ? raw : cell.textContent.trim();
    var n = parseFloat(text);
    return isNaN(n) || !/^[-+]?[0-9.]/.test(text) ? text.toLowerCase() : n;
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    var body = table.tBodies[0];
    table.querySelectorAll('thead th').forEach(function (th, col) {
      th.classList.add('sort');
      th.addEventListener('click', function () {
        var down = th.getAttribute('data-dir') !== 'desc';
        table.querySelectorAll('thead th').forEach(function (h) { h.removeAttribute('data-dir'); });
        th.setAttribute('data-dir', down ? 'desc' : 'asc');
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          if (typeof x !== typeof y) { x = String(x); y = String(y); }
          return (x < y ? -1 : x > y ? 1 : 0) * (down ? -1 : 1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.querySelectorAll('input.filterbox').forEach(function (box) {
    box.addEventListener('input', function () {
      var table = document.getElementById(box.getAttribute('data-table'));
      var words = box.value.toLowerCase().split(/\s+/).filter(Boolean);
      var rows = table.tBodies.length ? table.tBodies[0].rows : table.rows;
      Array.prototype.forEach.call(rows, function (r) {
        if (r.querySelector('th')) { return; }
        var text = r.textContent.toLowerCase();
        r.style.display = words.every(function (w) { return text.indexOf(w) >= 0; }) ? '' : 'none';
      });
    });
  });
})();
