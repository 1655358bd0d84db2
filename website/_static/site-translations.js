// Sphinx 8.2 words its search summary as a plural pair that its Chinese catalog does not have yet (the
// catalog still has the older "found ${resultCount} page(s)" wording), so the Chinese book said it in
// English: add the pair, in the catalog's own words.
if (document.documentElement.lang.startsWith("zh") && typeof Documentation !== "undefined") {
  Object.assign(Documentation.TRANSLATIONS, {
    "Search finished, found one page matching the search query.": ["搜索完成，匹配到 ${resultCount} 页。"],
  });
}
