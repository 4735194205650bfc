"""devcluster"""
