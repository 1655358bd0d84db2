# [en] The notebook's language: say() and say_table() show text in this language only.
# [zh] 本笔记本的语言：say() 和 say_table() 只显示这种语言的文字。
LANG = None


def _show(text, lang):
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        # [en] Plain Python (no Jupyter kernel): print the text.
        # [zh] 普通 Python 进程（没有 Jupyter 内核）：直接打印文字。
        print(text)
        return
    # [en] Markdown for Jupyter, Colab and GitHub; the metadata names the language.
    # [zh] 在 Jupyter、Colab 和 GitHub 中以 Markdown 显示；元数据记录语言。
    display({"text/markdown": text, "text/plain": text}, raw=True, metadata={"lang": lang})


def say(**texts):
    # [en] Shows the text given for this notebook's language, e.g. say(en="passed").
    # [zh] 显示为本笔记本语言给出的文字，例如 say(zh="通过")。
    for lang, text in texts.items():
        if LANG is None or lang == LANG:
            _show(text, lang)


def _row(cells):
    return "| " + " | ".join(str(cell).replace("|", "\\|").replace("\n", " ") for cell in cells) + " |"


def say_table(rows, **headers):
    # [en] A Markdown table: the rows, then the headers in this notebook's language, e.g. en=["name"].
    # [zh] Markdown 表格：先给各行数据，再给本笔记本语言的表头，例如 zh=["名称"]。
    for lang, header in headers.items():
        if LANG is None or lang == LANG:
            lines = [_row(header), _row(["---"] * len(header))] + [_row(row) for row in rows]
            _show("\n".join(lines), lang)
