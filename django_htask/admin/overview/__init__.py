"""The admin's *Scheduler overview* page, in four parts: its figures read from the
database (:mod:`.data`, the upcoming occurrences counted by :mod:`.timeline`), what
goes where and who may see it (:mod:`.layout`), the inline SVG (:mod:`.charts`), and
the view (:mod:`.views`, registered by :mod:`django_htask.admin`)."""
