//! Namespaces and process handles (setns into a netns, pidfd_open, pidfd_send_signal): rustix covers these safely, so consumers call it directly and nothing is wrapped here yet.
