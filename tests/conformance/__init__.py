"""The test suites of the schedulers we replace (robfig/cron v3, croniter 7.0), ported
as data tables and run against our parser and schedules."""
