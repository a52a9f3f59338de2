// Phone-width navigation. pydata-sphinx-theme 0.17 opens its sidebar dialogs from the
// *first* `.primary-toggle` / `.secondary-toggle` on the page, which is a button in its
// own (hidden) header; the button sphinx-book-theme shows readers is a second one, and
// tapping it did nothing (pydata/pydata-sphinx-theme#2451,
// executablebooks/sphinx-book-theme#988). On narrow screens, pass the tap on to the
// button that has the handler. Wide screens keep sphinx-book-theme's own behaviour.
// Checked by tests/site/test_site_browser.py::test_phone_reader_can_open_the_navigation.
(function () {
  "use strict";
  const WIDE = "(min-width: 992px)";
  document.addEventListener("click", function (event) {
    if (window.matchMedia(WIDE).matches) return;
    for (const kind of ["primary-toggle", "secondary-toggle"]) {
      const pressed = event.target.closest && event.target.closest("." + kind);
      const handler = document.querySelector("." + kind);
      if (pressed && handler && pressed !== handler) {
        event.preventDefault();
        event.stopImmediatePropagation();
        handler.click();
        return;
      }
    }
  }, true);
})();
