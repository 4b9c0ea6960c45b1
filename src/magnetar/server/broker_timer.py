"""The former name of :class:`~magnetar.server.timer_alarm.TimerAlarm`, kept only for
``server/broker.py`` until it imports ``TimerAlarm``; nothing else uses it."""

from magnetar.server.timer_alarm import TimerAlarm as BrokerTimer

__all__ = ["BrokerTimer"]
