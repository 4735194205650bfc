"""autoscaling"""
