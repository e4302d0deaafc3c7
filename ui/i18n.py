"""The interface language: English (the source strings) or Simplified Chinese, chosen or from the system.

Translations are Qt `.qm` files compiled from `resources/i18n/*.ts` (scripts/update_translations.sh),
read through importlib.resources so a frozen build finds them. Qt's own strings (standard dialog
buttons) come from the `qtbase_*.qm` that ships with Qt, when it is there.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QCoreApplication, QLibraryInfo, QLocale, QTranslator

from ui.assets import translation

log = logging.getLogger("hearth.ui.i18n")

# Setting value → the name shown in the language menu (each in its own language).
LANGUAGES = {"system": "", "en": "English", "zh_CN": "简体中文"}
TRANSLATED = ("zh_CN",)


def resolve_language(choice: str, system: QLocale | None = None) -> str:
    """The language to show: a LANGUAGES key other than "system"."""
    if choice in LANGUAGES and choice != "system":
        return choice
    locale = system or QLocale.system()
    # Simplified Chinese wherever it is the written form: zh_CN, zh_SG, zh_Hans_*; not zh_TW / zh_HK.
    if (
        locale.language() == QLocale.Language.Chinese
        and locale.script() != QLocale.Script.TraditionalChineseScript
    ):
        return "zh_CN"
    return "en"


class Translations:
    """Installs and removes Hearth's translators on the application.

    `QTranslator.load(data)` keeps a pointer into the bytes it was given, so they are kept here for as
    long as the translator is installed.
    """

    def __init__(self) -> None:
        self._installed: list[tuple[QTranslator, bytes | None]] = []
        self.language = "en"

    def install(self, choice: str) -> str:
        self.remove()
        language = resolve_language(choice)
        self.language = language
        if language not in TRANSLATED:
            return language
        data = translation(f"hearth_{language}.qm")
        app = QCoreApplication.instance()
        if data is None or app is None:
            log.warning("no translation for %s; showing English", language)
            self.language = "en"
            return "en"
        hearth = QTranslator()
        if not hearth.load(data):
            log.warning("could not load the %s translation; showing English", language)
            self.language = "en"
            return "en"
        app.installTranslator(hearth)
        self._installed.append((hearth, data))
        qt = QTranslator()
        if qt.load(f"qtbase_{language}", QLibraryInfo.path(QLibraryInfo.LibraryPath.TranslationsPath)):
            app.installTranslator(qt)
            self._installed.append((qt, None))
        return language

    def remove(self) -> None:
        app = QCoreApplication.instance()
        for translator, _data in self._installed:
            if app is not None:
                app.removeTranslator(translator)
        self._installed.clear()
        self.language = "en"
