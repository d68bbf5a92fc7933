package metrics

// CountKill counts one program a limit or codellm ended in codellm_kills_total{reason} (reason is one of
// KillReasons); it makes the Service an execution.KillCounter.
func (m *Service) CountKill(reason string) { m.Kills.WithLabelValues(reason).Inc() }
