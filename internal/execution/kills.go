package execution

// KillCounter counts programs a limit or codellm ended, by codellm_kills_total's reason
// (Status.MetricReason); metrics.Service is one.
type KillCounter interface {
	CountKill(reason string)
}

// CountKill counts a program that ended with status s in k, when a limit or codellm ended it; a nil k
// counts nothing. Every path that runs a program counts here: Supervise (the runner API, workspace
// commands) and the pipeline's blocks.
func CountKill(k KillCounter, s Status) {
	if reason := s.MetricReason(); k != nil && reason != "" {
		k.CountKill(reason)
	}
}
