SELECT pacer_release_guids(%(guids)s::text[], %(owner)s) AS released
